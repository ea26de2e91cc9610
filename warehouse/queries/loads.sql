-- The ledger by unit: each load (a shard, a trial folder) with its content hash, what it
-- brought, when, and the code that loaded it (tool version; the schema revision, from
-- loads.detail). The source parameter keeps one source's loads (its name or URI). The filters
-- keep the loads that brought a trial they keep; a load that brought no trial is always listed.
SELECT l.id AS load_id, s.name AS source, l.unit, l.content_hash, l.status,
       l.n_rows AS "rows", l.n_trials AS trials, l.n_episodes_new AS episodes_new,
       l.n_episodes_duplicate AS episodes_duplicate, l.n_turns AS turns, l.n_bytes AS bytes,
       l.n_rejected AS rows_rejected, l.n_conflicts AS conflicts, l.started_at, l.finished_at,
       l.tool_version, l.detail
FROM loads l
JOIN sources s ON s.id = l.source_id
WHERE (CAST(:source AS TEXT) IS NULL OR s.name = :source OR s.uri = :source)
  AND (EXISTS (SELECT 1 FROM trial_loads tl JOIN trials t ON t.id = tl.trial_id
               WHERE tl.load_id = l.id AND {filters})
       OR NOT EXISTS (SELECT 1 FROM trial_loads tl WHERE tl.load_id = l.id))
ORDER BY l.id
