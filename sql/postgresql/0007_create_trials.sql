-- New trials in one round trip (issue #19): the experiment's row locked,
-- the limits counted under that lock, the trials inserted and the
-- experiment's next number moved on, in one statement's transaction.
-- SqlStore::CreateTrialsUpTo runs the same rules as separate statements on
-- SQLite (sql_store.cc); store_conformance_test holds both to them.
-- p_trials: a JSON array of {space_id, params, system_params, priority,
-- lease_owner, lease_ms, stop_step}; at most that many trials are made, in
-- its order. Errors carry SQLSTATEs of class U0 (no standard class starts
-- with U), which the driver maps to a Status: U0404 not found, U0412
-- failed precondition, U0400 invalid argument. VOLATILE (the default,
-- written out): each statement inside takes a snapshot of its own, which
-- the count below relies on.
CREATE FUNCTION hpo_create_trials(p_experiment BIGINT, p_max_total BIGINT, p_max_unfinished BIGINT,
                                  p_now BIGINT, p_trials TEXT)
RETURNS SETOF trials LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  e_state TEXT;
  e_next BIGINT;
  n BIGINT;
  unfinished BIGINT;
  bad RECORD;
  items JSONB := p_trials::jsonb;
BEGIN
  SELECT state, next_number INTO e_state, e_next FROM experiments WHERE id = p_experiment FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'U0404', MESSAGE = format('experiment %s does not exist', p_experiment);
  END IF;
  IF e_state <> 'running' THEN
    RAISE EXCEPTION USING ERRCODE = 'U0412',
      MESSAGE = format('experiment %s has ended (%s); it takes no new trials', p_experiment, e_state);
  END IF;
  n := jsonb_array_length(items);
  IF p_max_total IS NOT NULL THEN
    n := LEAST(GREATEST(p_max_total - e_next, 0), n);
  END IF;
  IF p_max_unfinished IS NOT NULL AND n > 0 THEN
    -- A statement of its own, so its snapshot is taken under the lock: it
    -- sees every trial another server made before it let the row go.
    SELECT COUNT(*) INTO unfinished FROM trials
      WHERE experiment_id = p_experiment AND state IN ('pending', 'leased', 'running');
    n := LEAST(GREATEST(p_max_unfinished - unfinished, 0), n);
  END IF;
  SELECT t.ord, t.v->>'space_id' AS space INTO bad
    FROM jsonb_array_elements(items) WITH ORDINALITY AS t(v, ord)
    WHERE t.ord <= n AND jsonb_typeof(t.v->'space_id') = 'number'
      AND NOT EXISTS (SELECT 1 FROM search_spaces s
                      WHERE s.id = (t.v->>'space_id')::BIGINT AND s.experiment_id = p_experiment)
    ORDER BY t.ord LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'U0400',
      MESSAGE = format('trials[%s].space_id: search space %s is not part of experiment %s',
                       bad.ord - 1, bad.space, p_experiment);
  END IF;
  RETURN QUERY
    INSERT INTO trials (experiment_id, space_id, number, params, system_params, state, priority,
                        created_ms, updated_ms, attempt, lease_owner, lease_expires_ms, started_ms, stop_step)
    SELECT p_experiment, (t.v->>'space_id')::BIGINT, e_next + t.ord - 1, t.v->>'params',
           t.v->>'system_params', CASE WHEN t.v->>'lease_owner' <> '' THEN 'leased' ELSE 'pending' END,
           (t.v->>'priority')::DOUBLE PRECISION, p_now, p_now,
           CASE WHEN t.v->>'lease_owner' <> '' THEN 1 ELSE 0 END, t.v->>'lease_owner',
           CASE WHEN t.v->>'lease_owner' <> '' THEN p_now + (t.v->>'lease_ms')::BIGINT END,
           CASE WHEN t.v->>'lease_owner' <> '' THEN p_now END, (t.v->>'stop_step')::BIGINT
    FROM jsonb_array_elements(items) WITH ORDINALITY AS t(v, ord)
    WHERE t.ord <= n
    ORDER BY t.ord
    RETURNING *;
  UPDATE experiments SET next_number = e_next + n, updated_ms = p_now WHERE id = p_experiment;
END $$;
