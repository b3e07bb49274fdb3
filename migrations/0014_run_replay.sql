-- A replay (`POST /api/runs/{id}/replay`) is a new run that names the run it replays.
ALTER TABLE runs ADD COLUMN replay_of_run_id uuid;
