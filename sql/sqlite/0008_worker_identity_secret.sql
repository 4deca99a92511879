-- Worker identity secrets: the first registration of a (host, instance)
-- hands the worker a random secret, kept in its id file, that registering
-- that identity again must present; only its SHA-256 (hex) is kept here.
-- Workers registered before this migration have none, which no secret
-- matches: once such a worker is unseen for a lease timeout, its identity
-- goes to the next registration of it, as a new worker with a new secret.
ALTER TABLE workers ADD COLUMN identity_hash TEXT NOT NULL DEFAULT '';
