-- Promotion-type early stopping (ASHA, Hyperband): a trial may pause at a
-- rung with its checkpoint and be resumed later, on any worker.
--   state 'paused'  stopped at a rung, kept for promotion
--   level           the rung it runs toward or is paused at (0 for every
--                   trial of a stopping-type rule)
--   stop_step       the step the current lease runs to before pausing;
--                   NULL: to the trial's end
--   resume_step     the step the current segment resumed after (its
--                   checkpoint's); 0: it started from scratch
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt
-- (the store runs migrations with foreign-key enforcement off and checks
-- the keys before committing).
CREATE TABLE trials_new (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id     INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  space_id          INTEGER REFERENCES search_spaces(id),
  number            INTEGER NOT NULL,
  params            TEXT NOT NULL,
  system_params     TEXT NOT NULL,
  state             TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'running', 'paused', 'completed',
                                                   'pruned', 'failed', 'cancelled')),
  priority          REAL NOT NULL DEFAULT 0,
  attempt           INTEGER NOT NULL DEFAULT 0,
  lease_owner       TEXT NOT NULL DEFAULT '',
  lease_expires_ms  INTEGER,
  created_ms        INTEGER NOT NULL,
  started_ms        INTEGER,
  finished_ms       INTEGER,
  updated_ms        INTEGER NOT NULL,
  final_metrics     TEXT NOT NULL DEFAULT '',
  reason            TEXT NOT NULL DEFAULT '',
  level             INTEGER NOT NULL DEFAULT 0,
  stop_step         INTEGER,
  resume_step       INTEGER NOT NULL DEFAULT 0,
  UNIQUE (experiment_id, number)
);
INSERT INTO trials_new (id, experiment_id, space_id, number, params, system_params, state, priority, attempt,
                        lease_owner, lease_expires_ms, created_ms, started_ms, finished_ms, updated_ms,
                        final_metrics, reason)
  SELECT id, experiment_id, space_id, number, params, system_params, state, priority, attempt, lease_owner,
         lease_expires_ms, created_ms, started_ms, finished_ms, updated_ms, final_metrics, reason
  FROM trials;
DROP TABLE trials;
ALTER TABLE trials_new RENAME TO trials;
CREATE INDEX trials_pending_idx ON trials (priority DESC, id) WHERE state = 'pending';
CREATE INDEX trials_lease_idx ON trials (lease_expires_ms) WHERE state IN ('leased', 'running');
CREATE INDEX trials_experiment_state_idx ON trials (experiment_id, state);
