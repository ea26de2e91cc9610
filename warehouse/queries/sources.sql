-- The ledger by source: what each source brought (units loaded, rows, episodes new and duplicate,
-- trials and runs, rows rejected, conflicts) and when it was first and last loaded. The filters
-- keep the sources that brought a trial they keep, counting those trials and their runs; a
-- source that brought no trial at all (every row rejected, say) is always listed.
WITH kept AS (
    SELECT l.source_id, tl.trial_id, t.run_id
    FROM loads l
    JOIN trial_loads tl ON tl.load_id = l.id
    JOIN trials t ON t.id = tl.trial_id
    WHERE {filters}
), units AS (
    SELECT source_id, count(*) AS units, sum(n_rows) AS n_rows, sum(n_episodes_new) AS episodes_new,
           sum(n_episodes_duplicate) AS episodes_duplicate, sum(n_rejected) AS rows_rejected,
           sum(n_conflicts) AS conflicts, min(started_at) AS first_load, max(finished_at) AS last_load
    FROM loads
    GROUP BY source_id
)
SELECT s.name AS source, s.kind, s.uri, s.revision,
       coalesce(u.units, 0) AS units,
       CAST(coalesce(u.n_rows, 0) AS BIGINT) AS "rows",
       CAST(coalesce(u.episodes_new, 0) AS BIGINT) AS episodes_new,
       CAST(coalesce(u.episodes_duplicate, 0) AS BIGINT) AS episodes_duplicate,
       (SELECT count(DISTINCT k.trial_id) FROM kept k WHERE k.source_id = s.id) AS trials,
       (SELECT count(DISTINCT k.run_id) FROM kept k WHERE k.source_id = s.id) AS runs,
       u.first_load, u.last_load,
       CAST(coalesce(u.rows_rejected, 0) AS BIGINT) AS rows_rejected,
       CAST(coalesce(u.conflicts, 0) AS BIGINT) AS conflicts
FROM sources s
LEFT JOIN units u ON u.source_id = s.id
WHERE EXISTS (SELECT 1 FROM kept k WHERE k.source_id = s.id)
   OR NOT EXISTS (SELECT 1 FROM loads l JOIN trial_loads tl ON tl.load_id = l.id WHERE l.source_id = s.id)
ORDER BY s.name, s.kind, s.uri
