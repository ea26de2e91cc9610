"""`warehouse serve` in a real browser (Debian's Chromium driven by playwright), on SQLite and
PostgreSQL: the CLI started as a user starts it, every page opened in a tab whose requests to
any other origin are aborted and recorded.

- every page renders with no console error, no CSP violation, no request leaving the origin,
  and fits a 1,280-pixel window and a phone's (wide tables scroll inside their .scroll box);
- a deep link #turn-42 opens at turn 42, and j/k move between turns;
- the diff marks the first difference of two trials that part at a known turn;
- a corpus of hostile texts (in task, trial and run names, labels, messages, tool calls,
  exceptions, verifier output) runs nothing and is shown as the text it is.

One server per backend for the module: the warehouse is examples/sample and a Harbor job with
tool calls and a multi-step trial (ingested by the CLI), and the fixture trials below.
Chromium missing: skipped locally, a failure under CI (conftest's `browser`)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from sqlalchemy import text

from browser import Server, Tab
from conftest import BACKENDS, fresh_warehouse
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from procs import run_cli
from warehouse.db.engine import make_engine, resolve_url
from warehouse.queries import QUERIES
from warehouse.runs import set_labels

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample"
JOB = ROOT / "tests" / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
JOB_RUN = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"  # the job's run key (its job_id)
MULTI_STEP = "task-session-chain-analysis__UGpJKzs"  # two steps, each with its reward
TOOL_CALLS = "task-calendar__8A83BnJ"

DESKTOP, PHONE = (1280, 900), (390, 844)

# --- the fixture trials ------------------------------------------------------------------------

RUN = "browser-a"
LONG = "long__0"  # 60 turns: #turn-42 is far down the page
LONG_TURNS = 60
PART_A, PART_B = "part__a", "part__b"  # one task, equal up to turn PART_AT, different from there
PART_AT = 7
PART_TURNS = 12
FILLER = 11  # more trials of RUN, so its trials come in pages of 5


def _turn(i: int, text: str) -> Turn:
    return Turn("user" if i % 2 == 0 else "assistant", text)


def plain_trials() -> list[Trial]:
    trials = [Trial(run_key=RUN, trial_name=LONG, task_name="long-task", reward=1.0, agent="terminus-2",
                    model="openai/gpt-4o", result="1.0",
                    episodes=[Episode(0, [_turn(i, f"long turn {i}\nline two of turn {i}")
                                          for i in range(LONG_TURNS)])])]
    for name, side in ((PART_A, "a"), (PART_B, "b")):
        turns = [_turn(i, f"shared turn {i}" if i < PART_AT else f"only {side} says {i}") for i in range(PART_TURNS)]
        trials.append(Trial(run_key=RUN, trial_name=name, task_name="part", reward=1.0 if side == "a" else 0.0,
                            agent="terminus-2", model="openai/gpt-4o", result="1.0" if side == "a" else "0.0",
                            episodes=[Episode(0, turns)]))
    for i in range(FILLER):
        reward = (i % 4) / 4
        trials.append(Trial(run_key=RUN, trial_name=f"fill-{i:02d}__x", task_name=f"fill-{i % 3}", reward=reward,
                            agent="terminus-2", model="openai/gpt-4o", result=str(reward),
                            n_input_tokens=1000 * i, n_output_tokens=100 * i, cost_usd=0.01 * i,
                            episodes=[Episode(0, [_turn(j, f"fill {i} turn {j}") for j in range(4)])]))
    return trials


# --- the hostile corpus --------------------------------------------------------------------------
#
# Each payload, if a page ran it or turned it into markup, would set window.__pwned or open a
# dialog; the page must show it as text instead.

SCRIPT = "<script>window.__pwned=1;alert(1)</script>"
IMG = '"><img src=x onerror="window.__pwned=2;alert(2)">'
JS_LINK = "javascript:window.__pwned=3;alert(3)"
TEXTAREA = "</textarea><script>window.__pwned=4</script>"
ESCAPES = "\x1b[31mred\x1b[0m"
RTL = "\u202eevil\u202c"
NUL = "nul\x00byte"
HUGE = "y" * 200_000  # one 200 KB line
SHORT_PAYLOADS = (SCRIPT, IMG, JS_LINK, TEXTAREA)
HOSTILE = " ".join((SCRIPT, IMG, JS_LINK, TEXTAREA, ESCAPES, RTL))

EVIL_RUN = "javascript:window.__pwned=5;alert(5)<b>"  # the run's key: every link to the run
EVIL_TRIAL = f"{IMG}__1"
EVIL_CALL = json.dumps({"name": SCRIPT, "arguments": {"cmd": HOSTILE, IMG: JS_LINK, "long": HUGE}})


def hostile_trials() -> list[Trial]:
    turns = [
        Turn("system", f"{HOSTILE}\n```html\n{SCRIPT}{TEXTAREA}\n```\n{NUL}"),
        Turn("user", f"{HOSTILE}\n{HUGE}"),
        Turn("assistant", f"<think>{HOSTILE}</think>\n{HOSTILE}\n<tool_call>\n{EVIL_CALL}\n</tool_call>"),
        Turn("assistant", HOSTILE, extra={
            "tool_calls": [{"tool_call_id": "c1", "function_name": IMG, "arguments": {SCRIPT: HOSTILE}}],
            "observation": {"results": [{"source_call_id": "c1", "content": f"{HOSTILE}\n{HUGE}"}]},
            "timestamp": SCRIPT}),
        Turn("user", f"<tool_call>{TEXTAREA}{IMG}</tool_call>"),  # a call whose JSON does not parse
    ]
    trials = []
    for i, (task, name) in enumerate([(SCRIPT, EVIL_TRIAL), (IMG, f"{SCRIPT}__2"), (JS_LINK, JS_LINK + "__3"),
                                      (TEXTAREA + ESCAPES + RTL, f"{TEXTAREA}{ESCAPES}{RTL}__4")]):
        trials.append(Trial(
            run_key=EVIL_RUN, trial_name=name, task_name=task, reward=float(i % 2), rewards={"reward": float(i % 2), SCRIPT: 0.5},
            agent=IMG, model=JS_LINK, result=SCRIPT, exception_type=SCRIPT, exception_message=f"{HOSTILE}\n{HUGE}",
            verifier_output=f"{HOSTILE}\n{HUGE}", instruction=HOSTILE,
            episodes=[Episode(0, turns)]))
    return trials


def build(engine) -> None:
    source = writer.ensure_source(engine, "parquet", "/fixture/browser", "browser")
    with writer.unit(engine, source, "plain", "hash-plain") as unit:
        unit.add_trials(plain_trials(), run_names={RUN: "browser A"})
    with writer.unit(engine, source, "hostile", "hash-hostile") as unit:
        unit.add_trials(hostile_trials(), run_names={EVIL_RUN: f"{IMG}{SCRIPT}"})
    with engine.begin() as conn:
        run_id = conn.execute(text("SELECT id FROM runs WHERE run_key = :k"), {"k": EVIL_RUN}).scalar_one()
        set_labels(conn, run_id, {SCRIPT: IMG, "step": JS_LINK})


@pytest.fixture(scope="module", params=BACKENDS)
def served(request, tmp_path_factory):
    """`warehouse serve` on this backend's warehouse, for the whole module."""
    with contextmanager(fresh_warehouse)(request.param, tmp_path_factory.mktemp("serve"), request) as url:
        done = run_cli(url, "ingest", str(SAMPLE), str(JOB))
        assert done.returncode == 0, done.stderr
        engine = make_engine(resolve_url(url))
        build(engine)
        engine.dispose()
        server = Server(url)
        try:
            yield server
        finally:
            server.stop()
        assert not server.tracebacks(), "".join(server.log)


@pytest.fixture
def tab(browser, served):
    tabs = []

    def open_(width: int = DESKTOP[0], height: int = DESKTOP[1]) -> Tab:
        tabs.append(Tab(browser, served.origin, width=width, height=height))
        return tabs[-1]

    yield open_
    for t in tabs:
        t.close()


# --- the URLs ----------------------------------------------------------------------------------

def run_path(key: str, query: str = "") -> str:
    return "/run/" + quote(key, safe="/") + (f"?{query}" if query else "")


def trial_path(key: str, name: str, query: str = "") -> str:
    return run_path(key) + "/trial/" + quote(name, safe="") + (f"?{query}" if query else "")


def diff_path(a: tuple[str, str], b: tuple[str, str]) -> str:
    return f"/diff?a={quote(a[0] + '/' + a[1], safe='')}&b={quote(b[0] + '/' + b[1], safe='')}"


SAMPLE_A = "9f8c2915-4688-461a-8cba-3901225a1cb2"  # examples/sample's two runs
SAMPLE_B = "b421acf4-22ff-44ae-abea-d6ef824bc737"
SAMPLE_TRIAL = "install-regex__LrFeFr9"  # in SAMPLE_A; install-regex__ZLah9XB is its task in SAMPLE_B


def _pages() -> dict[str, tuple[str, int]]:
    a, b, job = SAMPLE_A, SAMPLE_B, JOB_RUN
    out = {
        "runs": ("/", 200),
        "runs-sorted": ("/?sort=pass_rate&desc=1", 200),
        "runs-filtered": ("/?task=install-*&label=step%3D1", 200),
        "trials": (run_path(a), 200),
        "trials-sorted-filtered": (run_path(a, "sort=reward&desc=1&outcome=unsolved&task=*regex*"), 200),
        "trials-paged": (run_path(RUN, "size=5&page=2&sort=cost&desc=1"), 200),
        "trials-hostile": (run_path(EVIL_RUN), 200),
        "trial": (trial_path(a, SAMPLE_TRIAL), 200),
        "trial-episode": (trial_path(job, TOOL_CALLS, "source=main&episode=1"), 200),  # one of its others
        "trial-tool-calls": (trial_path(job, TOOL_CALLS), 200),
        "trial-multi-step": (trial_path(job, MULTI_STEP), 200),
        "trial-long": (trial_path(RUN, LONG), 200),
        "trial-hostile": (trial_path(EVIL_RUN, EVIL_TRIAL), 200),
        "diff-form": ("/diff", 200),
        "diff": (diff_path((RUN, PART_A), (RUN, PART_B)), 200),
        "diff-two-runs": (diff_path((a, SAMPLE_TRIAL), (b, "install-regex__ZLah9XB")), 200),
        "diff-hostile": (diff_path((EVIL_RUN, EVIL_TRIAL), (EVIL_RUN, f"{SCRIPT}__2")), 200),
        "matrix": ("/matrix", 200),
        "queries": ("/queries", 200),
        "search-form": ("/search", 200),
        "search": ("/search?q=regex", 200),
        "search-hostile": ("/search?q=" + quote("<script>"), 200),
        "error-404": (run_path("no-such-run"), 404),
        "error-400": ("/?sort=" + quote(SCRIPT), 400),
    }
    for name, query in QUERIES.items():
        two_runs = any(p.name == "a" for p in query.params)
        out[f"query-{name}"] = (f"/query/{name}" + (f"?a={quote(a)}&b={quote(b)}" if two_runs else ""), 200)
    return out


PAGES = _pages()  # every page, by name: (path, the status it answers)


# --- every page ----------------------------------------------------------------------------------

def test_the_tab_cuts_and_records_what_leaves_the_origin(served, tab):
    """What the checks below rely on: a request to another origin is aborted and recorded."""
    t = tab()
    t.open("/")
    other = "http://example.invalid/"
    with pytest.raises(Exception):
        t.page.goto(other)
    assert other in t.blocked

@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1280x900", "390x844"])
@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_clean_and_fits(served, tab, page, size):
    path, status = PAGES[page]
    t = tab(*size)
    t.open(path, status=status)
    bad = {kind: found for kind, found in t.problems().items() if found}
    assert not bad, f"{path}: {bad}"


# --- a trial: deep links and the keyboard ------------------------------------------------------

def in_view(t: Tab, element_id: str) -> bool:
    """Whether the element's top is within the window (what scrolling to it means)."""
    return t.page.evaluate("""id => { const e = document.getElementById(id); if (!e) return false;
                                       const top = e.getBoundingClientRect().top;
                                       return top >= 0 && top < window.innerHeight; }""", element_id)


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1280x900", "390x844"])
def test_a_deep_link_opens_at_its_turn_and_j_k_move_between_turns(served, tab, size):
    t = tab(*size)
    t.open(trial_path(RUN, LONG) + "#turn-42")
    assert t.page.evaluate("document.querySelectorAll('[data-turn]').length") == LONG_TURNS
    assert t.page.text_content("#turn-42 .body").strip() == "long turn 42\nline two of turn 42"
    assert in_view(t, "turn-42") and not in_view(t, "turn-0")
    t.page.keyboard.press("j")
    assert t.page.evaluate("location.hash") == "#turn-43" and in_view(t, "turn-43")
    t.page.keyboard.press("k")
    t.page.keyboard.press("k")
    assert t.page.evaluate("location.hash") == "#turn-41" and in_view(t, "turn-41")
    # In the search box, j is a letter typed, not a move.
    t.page.keyboard.press("/")
    t.page.keyboard.press("j")
    assert t.page.evaluate("location.hash") == "#turn-41"
    assert t.page.input_value("form.search input") == "j"
    assert not {kind: found for kind, found in t.problems().items() if found}


def test_a_multi_step_trial_shows_every_step_with_its_reward(served, tab):
    t = tab()
    t.open(trial_path(JOB_RUN, MULTI_STEP))
    steps = [h.split() for h in t.page.eval_on_selector_all("section.step > h2", "hs => hs.map(h => h.textContent)")]
    # The two steps with a trajectory, in the job's order, each with its verifier's reward.json.
    assert [s[1] for s in steps] == ["fixed-design", "final-summary"], steps
    assert [s[s.index("rewards") + 1:s.index("rewards") + 3] for s in steps] == [["reward", "1"], ["reward", "0.452,"]]
    # Every turn of every step is an anchor, numbered down the page.
    ids = t.page.eval_on_selector_all("[data-turn]", "ts => ts.map(t => t.id)")
    assert ids == [f"turn-{i}" for i in range(len(ids))] and len(ids) > 10
    assert not {kind: found for kind, found in t.problems().items() if found}


def test_tool_calls_show_as_calls_with_their_arguments(served, tab):
    t = tab()
    t.open(trial_path(JOB_RUN, TOOL_CALLS))
    calls = t.page.eval_on_selector_all(".call .fn", "fs => fs.map(f => f.textContent)")
    assert calls and all(name and name != "?" for name in calls), calls
    assert t.page.eval_on_selector_all(".call dl dt", "d => d.length") > 0


def test_thinking_is_folded_and_t_unfolds_it(served, tab):
    t = tab()
    t.open(trial_path(EVIL_RUN, EVIL_TRIAL))
    thinking = t.page.locator("#turn-2 details.thinking")
    assert thinking.count() == 1 and not thinking.evaluate("d => d.open")
    assert not t.page.is_visible("#turn-2 details.thinking .prose")
    t.page.keyboard.press("t")
    assert thinking.evaluate("d => d.open") and t.page.is_visible("#turn-2 details.thinking .prose")
    assert shown(HOSTILE) in thinking.text_content()


def test_search_hits_link_to_their_turn(served, tab):
    t = tab()
    t.open("/search?q=" + quote(f"only b says {PART_TURNS - 1}"))
    hits = t.page.eval_on_selector_all("ol.hits li > a", "as => as.map(a => a.getAttribute('href'))")
    assert len(hits) == 1 and hits[0].endswith(f"#turn-{PART_TURNS - 1}"), hits
    t.page.click("ol.hits li > a")
    t.page.wait_for_load_state("load")
    assert urlsplit(t.page.url).path == trial_path(RUN, PART_B)
    assert in_view(t, f"turn-{PART_TURNS - 1}")


# --- the diff -------------------------------------------------------------------------------------

def test_the_diff_marks_the_turn_where_two_trials_part(served, tab):
    t = tab()
    t.open(diff_path((RUN, PART_A), (RUN, PART_B)))
    first = t.page.locator("#first-difference")
    assert first.count() == 1 and "differs" in first.get_attribute("class")
    assert first.locator(f"#a-turn-{PART_AT}").count() == 1 and first.locator(f"#b-turn-{PART_AT}").count() == 1
    assert first.locator(f"#a-turn-{PART_AT} .body").text_content().strip() == f"only a says {PART_AT}"
    # Every row above it is the same on both sides.
    before = t.page.eval_on_selector_all(".pair[id^=row-]", "rs => rs.map(r => [r.id, r.className])")
    same = [row for row in before if int(row[0].split("-")[1]) < PART_AT]
    assert len(same) == PART_AT and all("same" in cls for _, cls in same), before
    # The mark links to it, and n goes to it too.
    t.page.click("a.first-mark")
    assert t.page.evaluate("location.hash") == "#first-difference" and in_view(t, "first-difference")
    t.page.evaluate("window.scrollTo(0, 0); history.replaceState(null, '', location.pathname + location.search)")
    t.page.keyboard.press("n")
    assert t.page.evaluate("location.hash") == "#first-difference" and in_view(t, "first-difference")


# --- a run's trials: sort, filter, pages ------------------------------------------------------

def rows(t: Tab, column: int) -> list[str]:
    return t.page.eval_on_selector_all(f"table.list tbody tr td:nth-child({column})",
                                       "cs => cs.map(c => c.textContent.trim())")


def test_a_runs_trials_sort_filter_and_page(served, tab):
    t = tab()
    total = 3 + FILLER
    t.open(run_path(RUN, "size=5"))
    assert f"{total} trials, page 1 of 3" in t.page.text_content("main")
    assert len(rows(t, 1)) == 5
    t.page.click("a[rel=next]")
    t.page.wait_for_load_state("load")
    assert "page=2" in t.page.url and len(rows(t, 1)) == 5
    t.page.click("text=last »")
    t.page.wait_for_load_state("load")
    assert len(rows(t, 1)) == total - 10
    # Sorting by reward (its header), highest first on the second click.
    t.open(run_path(RUN, "size=100"))
    t.page.click("th >> text=reward")
    t.page.wait_for_load_state("load")
    rewards = [float(r) for r in rows(t, 3)]
    assert rewards == sorted(rewards, reverse=True) and len(rewards) == total
    t.page.click("th >> text=reward")
    t.page.wait_for_load_state("load")
    assert [float(r) for r in rows(t, 3)] == sorted(rewards)
    # A task glob and an outcome, from the form.
    t.page.fill("form.filters input[name=task]", "part")
    t.page.select_option("form.filters select[name=outcome]", "solved")
    t.page.click("form.filters button[type=submit]")
    t.page.wait_for_load_state("load")
    assert rows(t, 1) == [PART_A]


def test_a_matrix_cell_leads_to_its_trials(served, tab):
    t = tab()
    t.open("/matrix?run=" + quote(RUN))
    cell = t.page.locator("td.cell a").first
    attempts = int(cell.text_content().split("/")[1])
    cell.click()
    t.page.wait_for_load_state("load")
    assert urlsplit(t.page.url).path == run_path(RUN) and len(rows(t, 1)) == attempts


# --- the hostile corpus ----------------------------------------------------------------------------

def shown(value: str) -> str:
    """A stored text as a page shows it: control characters and bidi overrides as visible marks."""
    from warehouse.serve.app import _text

    return _text(value)


HOSTILE_PAGES = {
    "runs": [IMG + SCRIPT, f"{SCRIPT}={IMG}", f"step={JS_LINK}", EVIL_RUN],
    "trials-hostile": [EVIL_TRIAL, SCRIPT, IMG, JS_LINK, shown(TEXTAREA + ESCAPES + RTL)],
    "matrix": [SCRIPT, IMG, JS_LINK, shown(TEXTAREA + ESCAPES + RTL)],
    "trial-hostile": [EVIL_TRIAL, shown(HOSTILE), shown(NUL), f"{SCRIPT}", IMG, "cmd"],
    "search-hostile": [EVIL_TRIAL, "<script>"],
    "diff-hostile": [EVIL_TRIAL, shown(HOSTILE)],
    "query-failures": [SCRIPT],
}


@pytest.mark.parametrize("page", HOSTILE_PAGES)
def test_hostile_texts_are_shown_as_text(served, tab, page):
    """Each payload is on the page as the characters it is (not run, not markup, not escaped
    twice), with terminal escapes, NUL and bidi overrides shown as visible marks."""
    path, status = PAGES[page]
    t = tab()
    t.open(path, status=status)
    content = t.page.text_content("main")
    missing = [value[:80] for value in HOSTILE_PAGES[page] if value not in content]
    assert not missing, path
    for raw in ("\x1b", "\x00", "\u202e", "&lt;script", "&quot;"):
        assert raw not in content, (path, raw)
    assert not {kind: found for kind, found in t.problems().items() if found}


def test_a_turn_cut_on_the_page_links_to_its_whole_text_as_plain_text(served, tab):
    t = tab()
    t.open(trial_path(EVIL_RUN, EVIL_TRIAL))
    link = t.page.locator("#turn-1 .cut a")
    assert link.count() == 1
    response = t.page.goto(served.origin + link.get_attribute("href"))
    assert response.status == 200 and response.headers["content-type"].startswith("text/plain")
    assert "sandbox" in response.headers["content-security-policy"]
    assert t.page.evaluate("document.body.innerText") == f"{HOSTILE}\n{HUGE}"
    assert not t.dialogs and t.page.evaluate("typeof window.__pwned") == "undefined"
