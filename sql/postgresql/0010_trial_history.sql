-- A trial's history, for its page in the dashboard and GET /api/v1/trials/{id}.
--
-- The device each step ran on, as the worker reported it: its id (no
-- foreign key: a pruned worker's devices go, its trials' steps stay) and
-- its device class, which outlives the device. NULL and '' for steps of
-- ask/tell clients and for steps stored before this migration.
ALTER TABLE measurements ADD COLUMN device_id BIGINT;
ALTER TABLE measurements ADD COLUMN device_class TEXT NOT NULL DEFAULT '';

-- What happened to a trial between its steps, as the server's trial events
-- said it (paused at a rung, resumed, moving to another device, preempted,
-- requeued, restarted, its system setting capped or unknown): the event's
-- type and its data (JSON). Creation, steps and the end are the trial's and
-- its measurements' own rows, not repeated here.
CREATE TABLE trial_events (
  id          BIGSERIAL PRIMARY KEY,
  trial_id    BIGINT NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  created_ms  BIGINT NOT NULL,
  type        TEXT NOT NULL,
  data        TEXT NOT NULL
);
CREATE INDEX trial_events_trial_idx ON trial_events (trial_id, id);
