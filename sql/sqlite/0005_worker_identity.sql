-- Workers that go away (issue #21): a stable identity, a gone mark, and
-- speed history that outlives the devices it was measured on.
--   instance  what tells a worker apart from the others on its host and stays
--             the same across its restarts (the pod name, or its worker id
--             file); '' for a worker that gave none, which never matches:
--             each of its registrations is a new worker, as before
--   gone_ms   when housekeeping found it unseen for N lease timeouts; NULL
--             while it is not gone (its next heartbeat or lease clears it)
-- A worker is pruned (deleted, with its devices) some time after it went
-- gone; the speed it measured stays, its device then NULL: placement's speed
-- model goes by device class, not by device.
ALTER TABLE workers ADD COLUMN instance TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN gone_ms INTEGER;
CREATE UNIQUE INDEX workers_identity_idx ON workers (host, instance) WHERE instance <> '';
CREATE INDEX workers_last_seen_idx ON workers (last_seen_ms);
-- SQLite cannot change a foreign key in place: the table is rebuilt (the
-- store runs migrations with foreign-key enforcement off and checks the keys
-- before committing).
CREATE TABLE speed_observations_new (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  device_id        INTEGER REFERENCES devices(id) ON DELETE SET NULL,
  device_class     TEXT NOT NULL,
  workload         TEXT NOT NULL,
  system_setting   TEXT NOT NULL,
  samples_per_sec  REAL NOT NULL,
  trial_id         INTEGER REFERENCES trials(id) ON DELETE SET NULL,
  observed_ms      INTEGER NOT NULL
);
INSERT INTO speed_observations_new (id, device_id, device_class, workload, system_setting, samples_per_sec,
                                    trial_id, observed_ms)
  SELECT id, device_id, device_class, workload, system_setting, samples_per_sec, trial_id, observed_ms
  FROM speed_observations;
DROP TABLE speed_observations;
ALTER TABLE speed_observations_new RENAME TO speed_observations;
CREATE INDEX speed_observations_workload_idx ON speed_observations (workload, id);
