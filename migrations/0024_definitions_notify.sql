-- Every instance that listens (the local server, on `tracon_runs`) hears when a tenant's agent
-- or skill definitions are written: `defs:<tenant>`, sent when the writing transaction commits.
-- It forgets what it compiled for that tenant at once, instead of finding out from a refused
-- run row (0023's guard, which still decides).

CREATE OR REPLACE FUNCTION tracon_definitions_written() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    written text;
BEGIN
    FOR written IN SELECT DISTINCT tenant_id FROM changed LOOP
        INSERT INTO definition_generations AS g (tenant_id, generation) VALUES (written, 1)
        ON CONFLICT (tenant_id) DO UPDATE SET generation = g.generation + 1;
        PERFORM pg_notify('tracon_runs', 'defs:' || written);
    END LOOP;
    RETURN NULL;
END
$$;
