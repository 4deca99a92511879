-- Checkpoints of paused trials (promotion-type early stopping) when the
-- artifact store is this database (hpo-server --artifacts postgresql, the
-- default on PostgreSQL): every replica of a fleet sees them.
--   checkpoint_uploads  one row per upload; committed_ms is set on the one
--                       that is the trial's checkpoint (at most one per
--                       trial), NULL on one still arriving or abandoned
--   checkpoint_chunks   an upload's bytes, 1 MiB per row, in seq order
-- No foreign key to trials: a checkpoint outlives nothing it needs, and it
-- is deleted when its trial ends (uploads abandoned by a dead worker with
-- it).
CREATE TABLE checkpoint_uploads (
  id BIGSERIAL PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  step BIGINT NOT NULL CHECK (step >= 0),
  size_bytes BIGINT NOT NULL CHECK (size_bytes >= 0),
  sha256 TEXT,
  started_ms BIGINT NOT NULL,
  committed_ms BIGINT
);
CREATE INDEX checkpoint_uploads_trial ON checkpoint_uploads (trial_id);
CREATE UNIQUE INDEX checkpoint_uploads_current ON checkpoint_uploads (trial_id) WHERE committed_ms IS NOT NULL;
CREATE TABLE checkpoint_chunks (
  upload_id BIGINT NOT NULL REFERENCES checkpoint_uploads (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL CHECK (seq >= 0),
  data BYTEA NOT NULL,
  PRIMARY KEY (upload_id, seq)
);
-- Model weights hardly compress: store them out of line without trying.
ALTER TABLE checkpoint_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
