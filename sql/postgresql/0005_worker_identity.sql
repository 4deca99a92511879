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
ALTER TABLE workers ADD COLUMN gone_ms BIGINT;
CREATE UNIQUE INDEX workers_identity_idx ON workers (host, instance) WHERE instance <> '';
CREATE INDEX workers_last_seen_idx ON workers (last_seen_ms);
ALTER TABLE speed_observations DROP CONSTRAINT speed_observations_device_id_fkey;
ALTER TABLE speed_observations ALTER COLUMN device_id DROP NOT NULL;
ALTER TABLE speed_observations ADD CONSTRAINT speed_observations_device_id_fkey
  FOREIGN KEY (device_id) REFERENCES devices(id) ON DELETE SET NULL;
