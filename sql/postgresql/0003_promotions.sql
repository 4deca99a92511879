-- Promotion-type early stopping (ASHA, Hyperband): a trial may pause at a
-- rung with its checkpoint and be resumed later, on any worker.
--   state 'paused'  stopped at a rung, kept for promotion
--   level           the rung it runs toward or is paused at (0 for every
--                   trial of a stopping-type rule)
--   stop_step       the step the current lease runs to before pausing;
--                   NULL: to the trial's end
--   resume_step     the step the current segment resumed after (its
--                   checkpoint's); 0: it started from scratch
ALTER TABLE trials DROP CONSTRAINT trials_state_check;
ALTER TABLE trials ADD CONSTRAINT trials_state_check
  CHECK (state IN ('pending', 'leased', 'running', 'paused', 'completed', 'pruned', 'failed', 'cancelled'));
ALTER TABLE trials ADD COLUMN level INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN stop_step BIGINT;
ALTER TABLE trials ADD COLUMN resume_step BIGINT NOT NULL DEFAULT 0;
