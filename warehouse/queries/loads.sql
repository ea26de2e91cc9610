-- The ledger by unit: each load (a shard, a trial folder) with its content hash, what it
-- brought, when, and the code that loaded it (tool version; the schema revision, from
-- loads.detail). The source parameter keeps one source's loads (its name or URI). The filters
-- keep the loads that brought a trial they keep; a load that brought no trial is always listed.
-- A load's links are asked for as a range of load ids, not by `=`, which means the same: by
-- `=`, PostgreSQL expects a load's links spread evenly through trial_loads and scans the table
-- for the first, where they lie together, in the order the loads wrote them: a scan past
-- every earlier load's links, for each load (math×20: 8 ms a load, 133 ms for 16 loads,
-- growing with loads × links). A range it expects to hold few rows, and takes the index.
SELECT l.id AS load_id, s.name AS source, l.unit, l.content_hash, l.status,
       l.n_rows AS "rows", l.n_trials AS trials, l.n_episodes_new AS episodes_new,
       l.n_episodes_duplicate AS episodes_duplicate, l.n_turns AS turns, l.n_bytes AS bytes,
       l.n_rejected AS rows_rejected, l.n_conflicts AS conflicts, l.started_at, l.finished_at,
       l.tool_version, l.detail
FROM loads l
JOIN sources s ON s.id = l.source_id
WHERE (CAST(:source AS TEXT) IS NULL OR s.name = :source OR s.uri = :source)
  AND (EXISTS (SELECT 1 FROM trial_loads tl JOIN trials t ON t.id = tl.trial_id
               WHERE tl.load_id BETWEEN l.id AND l.id AND {filters})
       OR NOT EXISTS (SELECT 1 FROM trial_loads tl WHERE tl.load_id BETWEEN l.id AND l.id))
ORDER BY l.id
