-- One measure among a run's trials that have it: the values at the two ranks each of the median
-- and the p90 lies between (the rank given and the next, or only the last), and the maximum.
-- Each is a walk along trial_lengths' partial index on (run_id, measure), never a sort (the
-- IS NOT NULL lets it be used), from the nearer end: the median's from the smallest value, the
-- p90's from the largest (p90_from_top counts the values above its upper rank), so the
-- walks cover 60% of the run's trials rather than 140%. The measure's name, the run's id and the
-- ranks are filled in by Python, which reads every measure of a run in one statement (these as
-- derived tables). Written in, not bound: PostgreSQL plans a prepared statement for any value
-- once it has run a few times (its generic plan), and for an OFFSET it cannot see it plans as
-- if for a long one, a sort instead of the walk.
SELECT median.low, median.high, p90.low, p90.high,
       (SELECT max({measure}) FROM trial_lengths WHERE run_id = {run} AND {measure} IS NOT NULL) AS top
FROM (SELECT min(v) AS low, max(v) AS high
      FROM (SELECT {measure} AS v FROM trial_lengths WHERE run_id = {run} AND {measure} IS NOT NULL
            ORDER BY {measure} LIMIT 2 OFFSET {median}) pair) median,
     (SELECT min(v) AS low, max(v) AS high
      FROM (SELECT {measure} AS v FROM trial_lengths WHERE run_id = {run} AND {measure} IS NOT NULL
            ORDER BY {measure} DESC LIMIT 2 OFFSET {p90_from_top}) pair) p90
