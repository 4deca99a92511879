-- Reads that scale (issue #19): what changed since a reader's last read.
--   revision              trials and measurements: the 64-bit id of the
--                         transaction that last wrote the row (and, for a
--                         trial, deleted some of its measurements). Ids are
--                         given out in one order but committed in another,
--                         so a reader's cursor is not the largest revision it
--                         saw but its snapshot's xmin: every transaction
--                         below it had ended when the reader read. Asking
--                         for revision >= cursor then misses nothing (it
--                         may repeat a row, which a reader applies again).
--                         Transaction ids never wrap at 64 bits and survive
--                         restarts.
--   curve_reset_revision  trials: the revision at which measurements of the
--                         trial were last deleted (a reclaimed or restarted
--                         attempt); a reader holding older points of the
--                         trial must drop them.
--   store_identity        a random name for this database, so that a
--                         cursor from another one is refused, not misread.
-- Triggers keep the columns right whatever statement writes a row. Rows
-- written before this migration keep revision 0: any reader's cursor comes
-- from a full read that saw them.
CREATE TABLE store_identity (id TEXT NOT NULL);
INSERT INTO store_identity (id) VALUES (substr(md5(random()::text || clock_timestamp()::text), 1, 16));
ALTER TABLE trials ADD COLUMN revision BIGINT NOT NULL DEFAULT 0,
                   ADD COLUMN curve_reset_revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE measurements ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
CREATE INDEX trials_revision_idx ON trials (experiment_id, revision);
CREATE INDEX measurements_revision_idx ON measurements (revision);
CREATE FUNCTION hpo_set_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.revision := pg_current_xact_id()::text::bigint;
  RETURN NEW;
END $$;
CREATE FUNCTION hpo_measurement_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE trials SET curve_reset_revision = pg_current_xact_id()::text::bigint WHERE id = OLD.trial_id;
  RETURN OLD;
END $$;
CREATE TRIGGER trials_revision BEFORE INSERT OR UPDATE ON trials
  FOR EACH ROW EXECUTE FUNCTION hpo_set_revision();
CREATE TRIGGER measurements_revision BEFORE INSERT OR UPDATE ON measurements
  FOR EACH ROW EXECUTE FUNCTION hpo_set_revision();
CREATE TRIGGER measurements_deleted AFTER DELETE ON measurements
  FOR EACH ROW EXECUTE FUNCTION hpo_measurement_deleted();
