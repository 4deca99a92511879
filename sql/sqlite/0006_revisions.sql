-- Reads that scale (issue #19): what changed since a reader's last read.
--   revision              trials and measurements: the value of a counter
--                         bumped by every insert and update of a row (and,
--                         for a trial, by the deletion of its measurements).
--                         SQLite runs one write transaction at a time, so a
--                         revision is committed before any larger one is
--                         given out: a reader that saw the counter at N has
--                         seen every row below N + 1.
--   curve_reset_revision  trials: the revision at which measurements of the
--                         trial were last deleted (a reclaimed or restarted
--                         attempt); a reader holding older points of the
--                         trial must drop them.
--   store_identity        a random name for this database, so that a
--                         cursor from another one is refused, not misread.
-- The triggers keep the columns right whatever statement writes a row.
-- Rows written before this migration keep revision 0: any reader's cursor
-- comes from a full read that saw them.
CREATE TABLE store_identity (id TEXT NOT NULL);
INSERT INTO store_identity (id) VALUES (lower(hex(randomblob(8))));
CREATE TABLE revision_counter (value INTEGER NOT NULL);
INSERT INTO revision_counter (value) VALUES (0);
ALTER TABLE trials ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN curve_reset_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE measurements ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
CREATE INDEX trials_revision_idx ON trials (experiment_id, revision);
CREATE INDEX measurements_revision_idx ON measurements (revision);
-- A trigger does not fire itself again (recursive_triggers is off), so the
-- UPDATE inside trials_revision_updated does not loop.
CREATE TRIGGER trials_revision_inserted AFTER INSERT ON trials BEGIN
  UPDATE revision_counter SET value = value + 1;
  UPDATE trials SET revision = (SELECT value FROM revision_counter) WHERE id = NEW.id;
END;
CREATE TRIGGER trials_revision_updated AFTER UPDATE ON trials BEGIN
  UPDATE revision_counter SET value = value + 1;
  UPDATE trials SET revision = (SELECT value FROM revision_counter) WHERE id = NEW.id;
END;
CREATE TRIGGER measurements_revision_inserted AFTER INSERT ON measurements BEGIN
  UPDATE revision_counter SET value = value + 1;
  UPDATE measurements SET revision = (SELECT value FROM revision_counter)
    WHERE trial_id = NEW.trial_id AND step = NEW.step;
END;
CREATE TRIGGER measurements_revision_updated AFTER UPDATE ON measurements BEGIN
  UPDATE revision_counter SET value = value + 1;
  UPDATE measurements SET revision = (SELECT value FROM revision_counter)
    WHERE trial_id = NEW.trial_id AND step = NEW.step;
END;
CREATE TRIGGER measurements_revision_deleted AFTER DELETE ON measurements BEGIN
  UPDATE revision_counter SET value = value + 1;
  UPDATE trials SET curve_reset_revision = (SELECT value FROM revision_counter) WHERE id = OLD.trial_id;
END;
