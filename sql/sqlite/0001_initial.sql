-- HeteroTune schema, version 1 (SQLite). Times are ms since the epoch.
CREATE TABLE experiments (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  name         TEXT NOT NULL,
  spec         TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('running', 'completed', 'cancelled', 'failed')),
  reason       TEXT NOT NULL DEFAULT '',
  next_number  INTEGER NOT NULL DEFAULT 0,
  created_ms   INTEGER NOT NULL,
  updated_ms   INTEGER NOT NULL,
  finished_ms  INTEGER
);

CREATE TABLE search_spaces (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id  INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  name           TEXT NOT NULL,
  spec           TEXT NOT NULL,
  UNIQUE (experiment_id, name)
);

CREATE TABLE trials (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id     INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  space_id          INTEGER REFERENCES search_spaces(id),
  number            INTEGER NOT NULL,
  params            TEXT NOT NULL,
  system_params     TEXT NOT NULL,
  state             TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'running', 'completed',
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
  UNIQUE (experiment_id, number)
);
CREATE INDEX trials_pending_idx ON trials (priority DESC, id) WHERE state = 'pending';
CREATE INDEX trials_lease_idx ON trials (lease_expires_ms) WHERE state IN ('leased', 'running');
CREATE INDEX trials_experiment_state_idx ON trials (experiment_id, state);

CREATE TABLE measurements (
  trial_id         INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  step             INTEGER NOT NULL,
  metrics          TEXT NOT NULL,
  samples_per_sec  REAL NOT NULL DEFAULT 0,
  system_setting   TEXT NOT NULL DEFAULT '{}',
  created_ms       INTEGER NOT NULL,
  PRIMARY KEY (trial_id, step)
);

CREATE TABLE workers (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  host           TEXT NOT NULL,
  labels         TEXT NOT NULL DEFAULT '{}',
  registered_ms  INTEGER NOT NULL,
  last_seen_ms   INTEGER NOT NULL
);

CREATE TABLE devices (
  id                INTEGER PRIMARY KEY AUTOINCREMENT,
  worker_id         INTEGER NOT NULL REFERENCES workers(id) ON DELETE CASCADE,
  ordinal           INTEGER NOT NULL,
  kind              TEXT NOT NULL CHECK (kind IN ('cpu', 'cuda')),
  name              TEXT NOT NULL,
  device_class      TEXT NOT NULL,
  cores             REAL NOT NULL DEFAULT 0,
  memory_bytes      INTEGER NOT NULL DEFAULT 0,
  benchmark_gflops  REAL NOT NULL DEFAULT 0,
  UNIQUE (worker_id, ordinal)
);

CREATE TABLE speed_observations (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  device_id        INTEGER NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  device_class     TEXT NOT NULL,
  workload         TEXT NOT NULL,
  system_setting   TEXT NOT NULL,
  samples_per_sec  REAL NOT NULL,
  trial_id         INTEGER REFERENCES trials(id) ON DELETE SET NULL,
  observed_ms      INTEGER NOT NULL
);
CREATE INDEX speed_observations_workload_idx ON speed_observations (workload, id);
