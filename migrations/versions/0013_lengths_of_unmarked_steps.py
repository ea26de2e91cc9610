"""A trial's length counts the further steps of a Harbor export read alone ("main#<n>"
episodes: the export has no step marker, so a multi-step trial's later steps are stored under
main's keys with a suffix) as it counts `step:<name>` conversations; before, only `main` and the
steps counted, and such a trial was as long as its first step. Upgrading recomputes the lengths
of the trials already loaded that have such episodes, and the trajectory counts of their
(run, task) summaries, as 0009 did. Downgrading keeps the new figures: they are what the data
says, and the older code reads them as they are.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# warehouse.summaries.own_trace_sql("e") as it was when this revision was written.
OWN_TRACE = ("(e.trace_source = 'main' OR substr(e.trace_source, 1, 5) = 'main#' "
             "OR (substr(e.trace_source, 1, 5) = 'step:' AND e.trace_source NOT LIKE '%/%'))")
HAS_UNMARKED_STEPS = "SELECT s.trial_id FROM episodes s WHERE substr(s.trace_source, 1, 5) = 'main#'"


def _longest_sum(column: str) -> str:
    return f"""(SELECT sum(e.{column}) FROM episodes e
                WHERE e.trial_id = trial_lengths.trial_id AND {OWN_TRACE}
                  AND e.id = (SELECT longest.id FROM episodes longest
                              WHERE longest.trial_id = e.trial_id AND longest.trace_source = e.trace_source
                              ORDER BY longest.n_turns DESC, longest.episode_index DESC LIMIT 1))"""


def upgrade() -> None:
    same = "IS NOT DISTINCT FROM" if op.get_bind().dialect.name == "postgresql" else "IS"
    op.execute(f"UPDATE trial_lengths SET turns = {_longest_sum('n_turns')}, chars = {_longest_sum('n_chars')} "
               f"WHERE trial_id IN ({HAS_UNMARKED_STEPS})")
    touched = (f"EXISTS (SELECT 1 FROM trials t WHERE t.id IN ({HAS_UNMARKED_STEPS}) "
               f"AND t.run_id = {{s}}.run_id AND t.task_id {same} {{s}}.task_id)")
    op.execute(f"""
        UPDATE run_task_breakdown SET n_with_trajectory = (
            SELECT count(l.turns) FROM trials t JOIN trial_lengths l ON l.trial_id = t.id
            WHERE t.run_id = run_task_breakdown.run_id AND t.task_id {same} run_task_breakdown.task_id
              AND t.agent {same} run_task_breakdown.agent AND t.model {same} run_task_breakdown.model
              AND t.exception_type {same} run_task_breakdown.exception_type)
        WHERE {touched.format(s='run_task_breakdown')}""")
    op.execute(f"""
        UPDATE run_task_outcomes SET n_with_trajectory = (
            SELECT sum(b.n_with_trajectory) FROM run_task_breakdown b
            WHERE b.run_id = run_task_outcomes.run_id AND b.task_id {same} run_task_outcomes.task_id)
        WHERE {touched.format(s='run_task_outcomes')}""")


def downgrade() -> None:
    pass
