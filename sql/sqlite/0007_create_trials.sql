-- PostgreSQL's 0007 adds hpo_create_trials, new trials in one round trip.
-- SQLite has no round trips: SqlStore::CreateTrialsUpTo runs the same rules
-- as separate statements inside the group commit. Nothing changes here;
-- the version is kept so that both dialects count alike.
SELECT 1;
