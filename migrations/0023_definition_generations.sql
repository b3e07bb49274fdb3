-- A tenant's definitions generation: one number that moves on with every write of any of its
-- agent or skill definitions (a new definition, a new version, a delete). The catalog keeps a
-- compiled agent with the generation it was compiled under and reads no definition again
-- while it is current; a run row's INSERT carries that generation as its guard and writes
-- nothing once it moved on (the run is then compiled again from the store). No row: 0.

CREATE TABLE definition_generations (
    tenant_id  text   PRIMARY KEY,
    generation bigint NOT NULL
);

CREATE FUNCTION tracon_definitions_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO definition_generations AS g (tenant_id, generation)
    SELECT DISTINCT tenant_id, 1 FROM changed
    ON CONFLICT (tenant_id) DO UPDATE SET generation = g.generation + 1;
    RETURN NULL;
END
$$;

-- Once per statement, over the tenants the statement wrote (a delete removes every version).
CREATE TRIGGER agent_definitions_inserted AFTER INSERT ON agent_definitions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
CREATE TRIGGER agent_definitions_deleted AFTER DELETE ON agent_definitions
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
CREATE TRIGGER agent_definitions_updated AFTER UPDATE ON agent_definitions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
CREATE TRIGGER skill_definitions_inserted AFTER INSERT ON skill_definitions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
CREATE TRIGGER skill_definitions_deleted AFTER DELETE ON skill_definitions
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
CREATE TRIGGER skill_definitions_updated AFTER UPDATE ON skill_definitions
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION tracon_definitions_written();
