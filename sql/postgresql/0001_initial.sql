-- HeteroTune schema, version 1 (PostgreSQL). Times are ms since the epoch.
CREATE TABLE experiments (
  id           BIGSERIAL PRIMARY KEY,
  name         TEXT NOT NULL,
  spec         TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('running', 'completed', 'cancelled', 'failed')),
  reason       TEXT NOT NULL DEFAULT '',
  next_number  BIGINT NOT NULL DEFAULT 0,
  created_ms   BIGINT NOT NULL,
  updated_ms   BIGINT NOT NULL,
  finished_ms  BIGINT
);

CREATE TABLE search_spaces (
  id             BIGSERIAL PRIMARY KEY,
  experiment_id  BIGINT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  name           TEXT NOT NULL,
  spec           TEXT NOT NULL,
  UNIQUE (experiment_id, name)
);

CREATE TABLE trials (
  id                BIGSERIAL PRIMARY KEY,
  experiment_id     BIGINT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  space_id          BIGINT REFERENCES search_spaces(id),
  number            BIGINT NOT NULL,
  params            TEXT NOT NULL,
  system_params     TEXT NOT NULL,
  state             TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'running', 'completed',
                                                   'pruned', 'failed', 'cancelled')),
  priority          DOUBLE PRECISION NOT NULL DEFAULT 0,
  attempt           INTEGER NOT NULL DEFAULT 0,
  lease_owner       TEXT NOT NULL DEFAULT '',
  lease_expires_ms  BIGINT,
  created_ms        BIGINT NOT NULL,
  started_ms        BIGINT,
  finished_ms       BIGINT,
  updated_ms        BIGINT NOT NULL,
  final_metrics     TEXT NOT NULL DEFAULT '',
  reason            TEXT NOT NULL DEFAULT '',
  UNIQUE (experiment_id, number)
);
CREATE INDEX trials_pending_idx ON trials (priority DESC, id) WHERE state = 'pending';
CREATE INDEX trials_lease_idx ON trials (lease_expires_ms) WHERE state IN ('leased', 'running');
CREATE INDEX trials_experiment_state_idx ON trials (experiment_id, state);

CREATE TABLE measurements (
  trial_id         BIGINT NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step             BIGINT NOT NULL,
  metrics          TEXT NOT NULL,
  samples_per_sec  DOUBLE PRECISION NOT NULL DEFAULT 0,
  system_setting   TEXT NOT NULL DEFAULT '{}',
  created_ms       BIGINT NOT NULL,
  PRIMARY KEY (trial_id, step)
);

CREATE TABLE workers (
  id             BIGSERIAL PRIMARY KEY,
  host           TEXT NOT NULL,
  labels         TEXT NOT NULL DEFAULT '{}',
  registered_ms  BIGINT NOT NULL,
  last_seen_ms   BIGINT NOT NULL
);

CREATE TABLE devices (
  id                BIGSERIAL PRIMARY KEY,
  worker_id         BIGINT NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
  ordinal           INTEGER NOT NULL,
  kind              TEXT NOT NULL CHECK (kind IN ('cpu', 'cuda')),
  name              TEXT NOT NULL,
  device_class      TEXT NOT NULL,
  cores             DOUBLE PRECISION NOT NULL DEFAULT 0,
  memory_bytes      BIGINT NOT NULL DEFAULT 0,
  benchmark_gflops  DOUBLE PRECISION NOT NULL DEFAULT 0,
  UNIQUE (worker_id, ordinal)
);

CREATE TABLE speed_observations (
  id               BIGSERIAL PRIMARY KEY,
  device_id        BIGINT NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  device_class     TEXT NOT NULL,
  workload         TEXT NOT NULL,
  system_setting   TEXT NOT NULL,
  samples_per_sec  DOUBLE PRECISION NOT NULL,
  trial_id         BIGINT REFERENCES trials(id) ON DELETE SET NULL,
  observed_ms      BIGINT NOT NULL
);
CREATE INDEX speed_observations_workload_idx ON speed_observations (workload, id);
