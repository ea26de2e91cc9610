-- One row per run: how many trials, how they ended, who ran them, when, from which sources, and
-- its readable name (a job's folder). The filters (--task, --model, --agent) narrow
-- the trials counted, and a run with none of them is left out; sources and name are the run's.
-- A trial succeeds when reward >= --threshold; mean_reward averages the trials that have a reward.
SELECT
    r.run_key,
    r.name,
    count(tr.id) AS trials,
    sum(CASE WHEN tr.status = 'complete' THEN 1 ELSE 0 END) AS complete,
    sum(CASE WHEN tr.status = 'incomplete' THEN 1 ELSE 0 END) AS incomplete,
    CAST(sum(CASE WHEN tr.reward >= :threshold THEN 1 ELSE 0 END) AS DOUBLE PRECISION)
        / NULLIF(count(tr.id), 0) AS pass_rate,
    avg(tr.reward) AS mean_reward,
    count(tr.exception_type) AS errors,
    (SELECT string_agg(a.agent, ', ')
       FROM (SELECT DISTINCT t2.agent FROM trials t2
              WHERE t2.run_id = r.id AND t2.agent IS NOT NULL AND {filters_t2} ORDER BY t2.agent) a) AS agents,
    (SELECT string_agg(m.model, ', ')
       FROM (SELECT DISTINCT t2.model FROM trials t2
              WHERE t2.run_id = r.id AND t2.model IS NOT NULL AND {filters_t2} ORDER BY t2.model) m) AS models,
    min(tr.started_at) AS first_started,
    max(tr.started_at) AS last_started,
    (SELECT string_agg(s.name, ', ')
       FROM (SELECT DISTINCT src.name FROM trials t2
               JOIN trial_loads tl ON tl.trial_id = t2.id
               JOIN loads l ON l.id = tl.load_id
               JOIN sources src ON src.id = l.source_id
              WHERE t2.run_id = r.id ORDER BY src.name) s) AS sources
FROM runs r
LEFT JOIN trials tr ON tr.run_id = r.id AND {filters}
WHERE {filters_runs}
GROUP BY r.id, r.run_key, r.name
HAVING {trials_narrowed} = 0 OR count(tr.id) > 0
ORDER BY r.run_key
