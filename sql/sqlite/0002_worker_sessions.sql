-- Worker sessions: Register hands each worker a random secret that its later
-- calls present; only its SHA-256 (hex) is kept. Workers registered before
-- this migration have none, match no session, and register again.
ALTER TABLE workers ADD COLUMN session_hash TEXT NOT NULL DEFAULT '';
