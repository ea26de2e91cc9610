"""`warehouse serve`'s trial and diff pages, as the server renders them (the Flask test client
over a real SQLite file and a real PostgreSQL database): what a trajectory page shows, how two
trials are aligned, and the whole text behind a cut turn. The browser's view of the same pages
is tests/test_serve_browser.py."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from procs import run_cli
from warehouse.serve.app import create_app, episode_urls, trial_url
from warehouse.serve.pages import TURN_CHARS, Viewer, align, blocks
from warehouse.db.engine import resolve_url

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
JOB_RUN = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"

COMMON = [Turn("system", "You are an agent."), Turn("user", "Fix the bug."),
          Turn("assistant", "<think>Look first.</think>\n<tool_call>\n"
                            '{"name": "bash", "arguments": {"command": "ls -la\\ncat x.py"}}\n</tool_call>'),
          Turn("user", "x.py\n")]
PART_AT = len(COMMON)  # the first turn where the two attempts differ
LEFT = COMMON + [Turn("assistant", "Done.\n```python\nprint('a')\n```\nthat is all")]
RIGHT = COMMON + [Turn("assistant", "Giving up."), Turn("user", "ok")]
LONG = "é" * (TURN_CHARS + 5) + "\x00 end \U0001f600"


def _add(engine, name: str, trials: list[Trial]) -> None:
    source = writer.ensure_source(engine, "parquet", f"/fixture/{name}", name)
    with writer.unit(engine, source, f"unit-{name}", f"hash-{name}") as unit:
        unit.add_trials(trials)


@pytest.fixture
def client(db_url, engine):
    _add(engine, "attempts", [
        Trial(run_key="run-x", trial_name="t__a", task_name="task1", reward=1.0, result="1.0",
              episodes=[Episode(0, LEFT[:2]), Episode(1, LEFT)]),
        Trial(run_key="run-x", trial_name="t__b", task_name="task1", reward=0.0, result="0.0",
              episodes=[Episode(0, RIGHT)]),
        Trial(run_key="run-x", trial_name="long__0", task_name="task2", reward=0.0, result="0.0",
              episodes=[Episode(0, [Turn("user", "go"), Turn("assistant", LONG)])]),
    ])
    app = create_app(Viewer(resolve_url(db_url), timeout=10, max_rows=1000), title="test")
    return app.test_client()


def page(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.data[-400:]
    return response.get_data(as_text=True)


def anchors(text: str) -> list[str]:
    return re.findall(r'<article class="turn[^"]*" id="([^"]+)"', text)


def test_a_trial_page_numbers_its_turns_and_shows_calls_thinking_and_code(client):
    text = page(client, "/run/run-x/trial/t__a")
    # The longest episode, every turn an anchor down the page.
    assert anchors(text) == [f"turn-{n}" for n in range(len(LEFT))]
    assert 'class="call"' in text and '<span class="fn">bash</span>' in text
    # A multi-line argument shown whole, in a block; the thinking folded away.
    assert "<pre>ls -la\ncat x.py</pre>" in text
    assert '<details class="thinking"><summary>thinking</summary>' in text and "Look first." in text
    assert "<pre><code>print(&#39;a&#39;)</code></pre>" in text
    # The earlier episode (a prefix) is linked, not shown.
    assert "/run/run-x/trial/t__a?source=main&amp;episode=0" in text


def test_an_episode_by_its_source_and_index(client):
    text = page(client, "/run/run-x/trial/t__a?source=main&episode=0")
    assert anchors(text) == ["turn-0", "turn-1"]
    assert "no episode 7" in page(client, "/run/run-x/trial/t__a?source=main&episode=7", 400)


def test_a_prefix_or_a_run_name_is_sent_to_the_trials_own_url(client):
    response = client.get("/run/run-x/trial/long")
    assert response.status_code == 302 and response.headers["Location"].endswith("/run/run-x/trial/long__0")
    assert "no trial" in page(client, "/run/run-x/trial/nope", 404)
    assert "no run" in page(client, "/run/nope", 404)


def test_a_cut_turn_links_its_whole_text_byte_for_byte(client):
    text = page(client, "/run/run-x/trial/long__0")
    assert f"Cut at 20,000 of {len(LONG):,} characters" in text
    link = html.unescape(re.search(r'href="(/trial/\d+/text\?[^"]+)"', text).group(1))
    response = client.get(link)
    assert response.status_code == 200 and response.mimetype == "text/plain"
    assert response.headers["Content-Security-Policy"] == "sandbox"
    assert response.get_data(as_text=True) == LONG


def test_the_diff_aligns_turns_and_marks_where_they_part(client):
    text = page(client, "/diff?a=run-x/t__a&b=run-x/t__b")
    # The row marked: from its element to the next row's.
    first = re.search(r'<div class="pair differs" id="first-difference" data-difference>(.*?)<div class="pair ',
                      text, re.S)
    assert first is not None
    assert f'id="a-turn-{PART_AT}"' in first.group(1) and f'id="b-turn-{PART_AT}"' in first.group(1)
    assert f"They part at turn {PART_AT} of A, turn {PART_AT} of B" in text
    # Before it, every row is the same turn on both sides.
    assert text.count('class="pair same"') == PART_AT
    # The same trial against itself: no difference.
    assert "The two trajectories are the same" in page(client, "/diff?a=run-x/t__a&b=run-x/t__a")


def test_episode_links_are_the_trial_urls_of_their_episodes():
    episodes = [{"trace_source": "main", "episode_index": 1}, {"trace_source": "a b/c&d?#é", "episode_index": 0},
                {"trace_source": None, "episode_index": 2}, {"trace_source": "", "episode_index": 3},
                {"trace_source": "main", "episode_index": 4}]
    assert episode_urls("org/data set", "t n#1", episodes) == [
        trial_url("org/data set", "t n#1", source=ep["trace_source"], episode=ep["episode_index"]) for ep in episodes]


def test_a_template_reads_a_stored_key_named_as_a_dict_method_as_the_method():
    # The pages' dicts are read key first (app._Environment): a reward key called `items` or
    # `get` must not hide the method a template calls.
    env = create_app(Viewer(resolve_url("sqlite:///unused.db"), timeout=10, max_rows=10)).jinja_env
    template = env.from_string("{% for k, v in r.items() %}{{ k }}={{ v }};{% endfor %}{{ r.get('get') }}"
                               "|{{ r.reward }}|{{ r.missing is undefined }}|{{ o.real }}")
    assert template.render(r={"items": 1, "get": 2, "reward": 0.5}, o=3) == "items=1;get=2;reward=0.5;2|0.5|True|3"


def test_align_puts_an_inserted_turn_opposite_a_gap():
    def turns(*texts):
        return [{"role": "user", "parts": [{"kind": "text", "blocks": [("prose", t, "")]}], "n": t} for t in texts]

    rows = align(turns("a", "b", "c"), turns("a", "x", "b", "c"))
    assert [(r["a"] and r["a"]["n"], r["b"] and r["b"]["n"], r["same"]) for r in rows] == [
        ("a", "a", True), (None, "x", False), ("b", "b", True), ("c", "c", True)]


def test_blocks_keep_fenced_code_whole():
    assert blocks("intro\n```sh\nls\n  cd x\n```\nafter") == [
        ("prose", "intro", ""), ("code", "ls\n  cd x", "sh"), ("prose", "after", "")]
    assert blocks("```\nunclosed\nstill code") == [("code", "unclosed\nstill code", "")]


def test_a_multi_step_trial_shows_every_step_with_its_rewards(tmp_path, db_url):
    job = tmp_path / JOB.name
    shutil.copytree(JOB, job)
    assert run_cli(db_url, "ingest", str(job)).returncode == 0
    client = create_app(Viewer(resolve_url(db_url), timeout=10, max_rows=1000), title="t").test_client()
    text = page(client, f"/run/{JOB_RUN}/trial/task-session-chain-analysis__UGpJKzs")
    steps = re.findall(r"<h2>step ([^ ]+) · episode \d+ · [\d,]+ turns\s*<span class=\"reward\">· rewards reward ([\d.]+)",
                       text)
    assert [name for name, _ in steps] == ["fixed-design", "final-summary"]
    # Turns are numbered down the page, across the steps.
    numbers = [int(a.split("-")[1]) for a in anchors(text)]
    assert numbers == list(range(len(numbers))) and len(numbers) > 2


def test_a_search_hit_in_a_trials_own_text_links_to_that_text(client, engine):
    """A hit in a verifier's output or an exception message links to that section of its
    trial's page (#verifier, #exception), which the page has."""
    _add(engine, "texts", [Trial(run_key="run-y", trial_name="y__0", task_name="task1", reward=None,
                                 result="AgentTimeoutError", exception_type="AgentTimeoutError",
                                 exception_message="Agent execution timed out after 540.0 seconds",
                                 verifier_output="tests timed out too", episodes=[Episode(0, [Turn("user", "go")])])])
    text = page(client, "/search?q=timed+out")
    links = re.findall(r'<li><a href="([^"]+)">', text)
    assert [html.unescape(link).rsplit("#", 1)[1] for link in links] == ["verifier", "exception"]
    trial = page(client, html.unescape(links[0]).rsplit("#", 1)[0])
    assert 'id="verifier"' in trial and 'id="exception"' in trial


def test_the_search_page_takes_a_regular_expression(client, engine):
    _add(engine, "regex", [Trial(run_key="run-r", trial_name="r__0", task_name="task1", reward=None,
                                 result="AgentTimeoutError", exception_type="AgentTimeoutError",
                                 exception_message="Agent execution timed out after 540.0 seconds",
                                 episodes=[Episode(0, [Turn("user", "go")])])])
    assert "1 hit" in page(client, "/search?q=timed%3F+out+after+%5B0-9%5D%2B&regex=1")
    assert "0 hits" in page(client, "/search?q=timed%3F+out+after+%5B0-9%5D%2B")  # taken literally
    checked = page(client, "/search?q=x&regex=1")
    assert re.search(r'name="regex" value="1" checked', checked)
    bad = client.get("/search?q=%28&regex=1")
    assert bad.status_code in (400, 422) and "regular expression" in bad.get_data(as_text=True)
