"""Synthetic Hugging Face Hub datasets shaped like `harbor traces export` output.

The warehouse ingests Parquet datasets with one row per exported *episode*. Real exports are
large, private or both, so tests, examples and benchmarks use this generator instead. It
writes the same layout the Hub uses (a dataset card plus `data/train-0000i-of-0000N.parquet`
shards) with the same columns and types `harbor traces export` produces, and with the
statistical shape of real exports that matters for ingest: rows per trial, turns per row,
text sizes, which texts repeat (task prompts across attempts, conversation prefixes across
episodes) and the variety of `result` values.

Everything is a pure function of the arguments: one `random.Random(seed)` drives every
choice (names, dates, UUIDs, texts), so the same arguments give the same bytes.

    python -m tools.generate OUT --profile tb --episodes all --shards 4 --seed 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

COMPRESSION = "zstd"
# Row groups close at whichever comes first, so `episodes="all"` exports (whose rows repeat
# long prefixes) keep bounded memory while normal exports get ~1000-row groups.
ROW_GROUP_ROWS = 1000
ROW_GROUP_TEXT_BYTES = 64 << 20

ROLES = ("user", "assistant")  # messages alternate, starting with the rendered prompt


# --- profiles ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """The shape of one kind of export. Sizes are means in bytes; the generator draws
    around them (log-normal), so totals land near but not exactly on the targets."""

    name: str
    description: str
    style: str  # "math" (OpenCode math RL rollouts) or "terminal" (terminus-2 evals)
    agent: str
    models: tuple[str, ...]  # run r uses models[r % len(models)]
    n_tasks: int
    runs: int
    attempts: int
    # Assistant messages per trial ~ round(triangular(low, high, mode)); the conversation has
    # twice as many messages (plus an unanswered user message after some failed trials).
    assistant_turns: tuple[float, float, float]
    prompt_template: str  # key of PROMPT_TEMPLATES
    instruction_bytes: int
    assistant_bytes: int
    user_bytes: int
    long_output_prob: float = 0.0  # chance a tool/terminal output is a long dump
    long_output_bytes: int = 0
    think_prob: float = 0.0  # chance an assistant message opens with a <think> block
    p_success: float = 0.5
    p_exception: float = 0.02
    p_null: float = 0.0
    exceptions: tuple[str, ...] = ("AgentTimeoutError", "ContextLengthExceededError")
    n_tests: tuple[int, int] = (1, 1)  # verifier tests per task (inclusive range)
    partial_reward: bool = False  # reward = fraction of tests passed, else all-or-nothing
    rl: bool = False  # RL rollouts: run_id == trial_name
    instruction: bool = False  # whether the `instruction` column is written
    unicode_rate: float = 0.002  # share of prose words drawn from the non-ASCII vocabulary
    org_every: int = 0  # every Nth task is named "org/name" (0: never)
    forced_results: tuple[str | None, ...] = ()  # results of the first trials, for variety
    # Size of the sentence/line pools texts are sampled from. Big pools keep big datasets
    # from compressing unrealistically well; small ones keep tiny datasets fast to make.
    pool_lines: int = 20000


PROFILES: dict[str, Profile] = {
    "math": Profile(
        name="math",
        description="OpenCode math RL rollouts (one row per trial, run_id == trial_name).",
        style="math",
        agent="opencode",
        models=("hosted_vllm/Qwen3-8B",),
        n_tasks=1739,
        runs=1,
        attempts=9,  # 1739 * 9 = 15,651 rows
        assistant_turns=(1, 4, 2.5),  # 2..8 messages, ~5 on average
        prompt_template="math",
        instruction_bytes=900,
        assistant_bytes=1950,
        user_bytes=850,
        long_output_prob=0.03,
        long_output_bytes=6000,
        think_prob=0.6,
        p_success=0.55,
        p_exception=0.03,
        p_null=0.002,
        rl=True,
        instruction=True,
    ),
    "tb": Profile(
        name="tb",
        description="terminus-2 terminal-bench evaluation (2 jobs x 26 tasks x 5 attempts).",
        style="terminal",
        agent="terminus-2",
        models=("hosted_vllm/Qwen3-8B",),
        n_tasks=26,
        runs=2,
        attempts=5,  # 2 * 26 * 5 = 260 rows
        assistant_turns=(8, 30, 11.5),  # 16..60 messages, ~33 on average
        prompt_template="terminus",
        instruction_bytes=900,
        assistant_bytes=900,
        user_bytes=700,
        long_output_prob=0.22,
        long_output_bytes=14000,
        think_prob=0.3,
        p_success=0.35,
        p_exception=0.08,
        p_null=0.01,
        exceptions=("AgentTimeoutError", "ContextLengthExceededError", "VerifierTimeoutError"),
        n_tests=(2, 9),
    ),
    "tiny": Profile(
        name="tiny",
        description="A tiny mixed export for examples and tests (2 jobs x 6 tasks x 3 attempts).",
        style="terminal",
        agent="terminus-2",
        models=("openai/gpt-4o", "hosted_vllm/Qwen3-8B"),
        n_tasks=6,
        runs=2,
        attempts=3,
        assistant_turns=(2, 4, 3),  # 4..8 messages
        prompt_template="terminus_short",
        instruction_bytes=160,
        assistant_bytes=220,
        user_bytes=160,
        think_prob=0.2,
        p_success=0.4,
        p_exception=0.1,
        p_null=0.06,
        n_tests=(4, 4),
        partial_reward=True,  # gives "0.25", "0.5", "0.75"
        instruction=True,
        unicode_rate=0.08,
        org_every=3,
        # Guaranteed variety however the dice fall: a null result, an exception, a partial reward.
        forced_results=(None, "AgentTimeoutError", "0.25", "ContextLengthExceededError"),
        pool_lines=1500,
    ),
}


# --- result summary ------------------------------------------------------------------------


@dataclass
class GeneratedInfo:
    out_dir: Path
    files: list[Path]
    n_rows: int
    n_trials: int
    n_turns: int  # sum of len(conversations) over rows
    text_bytes: int  # UTF-8 bytes of every message content of every row
    # UTF-8 bytes of the distinct strings among message contents, verifier outputs and
    # instructions, each distinct string counted once.
    distinct_text_bytes: int
    # The distinct `run_id` values written, in order. For eval exports these are the job
    # UUIDs (one per run); for RL exports run_id == trial_name, so this lists every trial
    # (the warehouse derives the run of an RL export from the dataset name instead).
    runs: list[str]
    profile: str = ""
    episodes: str = "last"
    seed: int = 0
    scale: float = 1.0
    rl: bool = False
    instruction: bool = False
    n_tasks: int = 0
    n_runs: int = 0  # logical runs (jobs); for RL len(runs) == n_trials instead
    # Distinct message contents plus instructions: what a content-addressed `messages`
    # table holds (verifier outputs are trial columns, not messages).
    distinct_message_bytes: int = 0
    file_bytes: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        mb = 1_000_000
        return "\n".join(
            [
                f"wrote {self.out_dir} (profile={self.profile}, episodes={self.episodes}, "
                f"seed={self.seed}, scale={self.scale}, rl={self.rl}, instruction={self.instruction})",
                f"  files:               {len(self.files)} ({self.file_bytes / mb:.2f} MB on disk)",
                f"  rows:                {self.n_rows}",
                f"  trials:              {self.n_trials} ({self.n_tasks} tasks, {self.n_runs} runs)",
                f"  turns:               {self.n_turns}",
                f"  text bytes:          {self.text_bytes / mb:.2f} MB",
                f"  distinct text bytes: {self.distinct_text_bytes / mb:.2f} MB",
                f"  seconds:             {self.seconds:.2f}",
            ]
        )


# --- Parquet schema ------------------------------------------------------------------------

_SCALAR_COLUMNS = (
    "agent",
    "model",
    "model_provider",
    "date",
    "task",
    "episode",
    "run_id",
    "trial_name",
    "result",
    "verifier_output",
)


def dataset_schema(instruction: bool) -> pa.Schema:
    """The Arrow schema of an export. The struct's field order (content, role) and the
    `huggingface` metadata are what the `datasets` library writes on push_to_hub."""
    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    fields = [pa.field("conversations", pa.list_(message))]
    fields += [pa.field(name, pa.string()) for name in _SCALAR_COLUMNS]
    if instruction:
        fields.append(pa.field("instruction", pa.string()))
    value = {"dtype": "string", "_type": "Value"}
    features: dict = {"conversations": [{"content": value, "role": value}]}
    features.update({f.name: value for f in fields[1:]})
    meta = {"huggingface": json.dumps({"info": {"features": features}})}
    return pa.schema(fields, metadata=meta)


# --- vocabulary and text pools -------------------------------------------------------------

_WORDS = """
the of and to in is that for it as with was on be by this are or from at an which have not
has but we can all if will one there their so more when what also these been were would
value result file output function model task test step check first then next each because
after before where while need using use run running found make sure should could now let
compute number answer problem equation solution case cases term terms factor sum product
root roots integer integers prime divisible remainder modulo sequence series limit bound
bounds triangle circle radius angle side sides area length point points line lines plane
vector matrix determinant eigenvalue polynomial degree coefficient coefficients variable
variables constraint constraints condition conditions assume suppose therefore hence thus
since given consider note observe recall notice substitute simplify expand rewrite verify
directory command commands package packages install installed build error errors warning
missing permission denied config configuration server service port process processes log
logs script scripts module modules import path paths environment variable version library
dependency dependencies compile compiled binary test tests passing failing expected actual
current previous terminal shell output input string list dictionary key keys data database
table query index request response status code exit debug trace stack frame line column
approach plan analysis goal progress remaining complete completed done looks good correct
incorrect wrong right fix fixed update updated create created remove removed write written
read reading parse parsing format formatted json yaml csv header headers field fields row
rows column columns user users system memory cache buffer thread lock queue timeout retry
simple quick careful small large larger smaller same different other another new old only
just still already again however instead otherwise likely probably actually exactly clearly
two three four five six seven ten hundred many few several every some any no most least
"""
_WORD_LIST = tuple(_WORDS.split())
_UNICODE_WORDS = (
    "café", "naïve", "résumé", "façade", "Größe", "señal", "jalapeño", "déjà", "São", "Ærø",
    "数据", "测试", "日本語", "文件", "結果", "한국어", "πρόβλημα", "задача",
    "🚀", "✅", "🎉", "🔧", "📦", "≤", "≥", "→", "∑", "√", "×", "—", "…",
)
_PACKAGES = (
    "numpy", "pandas", "requests", "flask", "pytest", "scipy", "sympy", "torch", "rich",
    "pyyaml", "jinja2", "click", "sqlalchemy", "uvicorn", "fastapi", "httpx", "lxml", "boto3",
)
_EXTS = ("py", "c", "h", "txt", "json", "yaml", "log", "sh", "md", "csv", "toml", "rs", "go")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_TASK_SOURCES = ("deepmath", "numina", "omni-math", "aime-style", "gsm-hard", "mathinstruct")
_TASK_VERBS = (
    "fix", "build", "configure", "debug", "migrate", "optimize", "recover", "deploy", "parse",
    "train", "compress", "decrypt", "benchmark", "install", "patch", "profile", "serve", "sort",
)
_TASK_NOUNS = (
    "git", "nginx", "sqlite", "cron", "webserver", "pipeline", "compiler", "cache", "logs",
    "archive", "kernel", "dataset", "api", "cluster", "tokenizer", "regex", "csv", "docker",
    "permissions", "ssl-cert", "makefile", "queue", "raft", "json-schema", "bloom-filter",
)
_ORGS = ("terminal-bench", "acme-labs", "harbor-registry")
_TRIAL_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # shortuuid's


class _Text:
    """Builds message texts quickly by sampling pre-generated pools of lines.

    Generating 120 MB word by word in Python is too slow, while repeating a handful of
    canned strings would compress to nothing. The middle ground: at start-up build tens of
    thousands of distinct sentences and code/terminal lines (random words, numbers, paths),
    then make each message by joining a random selection of them. A Parquet page (1 MB)
    sees a fair share of repeated lines, like real agent logs, but no two messages match.
    """

    def __init__(self, rng: random.Random, unicode_rate: float, pool_lines: int):
        self.rng = rng
        self.unicode_rate = unicode_rate
        n = pool_lines
        # Zipf-like weights so common words dominate, as in real text.
        self._cum = list(_accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(_WORD_LIST))))
        self.pools: dict[str, list[str]] = {
            "prose": [self._sentence() for _ in range(n)],
            "math": [self._math_line() for _ in range(n // 3)],
            "code": [self._code_line() for _ in range(n // 3)],
            "cmd": [self._command() for _ in range(n // 8)],
            "term": [self._terminal_line() for _ in range(n)],
        }
        self._avg = {k: sum(map(len, v)) / len(v) + 1 for k, v in self.pools.items()}

    # -- pool items (built once, so they may be slow-ish) --

    def word(self) -> str:
        if self.unicode_rate and self.rng.random() < self.unicode_rate:
            return self.rng.choice(_UNICODE_WORDS)
        return self.rng.choices(_WORD_LIST, cum_weights=self._cum)[0]

    def name(self) -> str:
        return "_".join(self.rng.choices(_WORD_LIST, cum_weights=self._cum, k=self.rng.randint(1, 2)))

    def path(self) -> str:
        r = self.rng
        parts = [self.name() for _ in range(r.randint(1, 3))]
        return f"/{r.choice(('app', 'app/src', 'tmp', 'workspace', 'usr/local/lib'))}/{'/'.join(parts)}.{r.choice(_EXTS)}"

    def _sentence(self) -> str:
        r = self.rng
        words = [self.word() for _ in range(r.randint(5, 20))]
        if r.random() < 0.15:
            words.insert(r.randrange(len(words)), f"`{self.path()}`")
        if r.random() < 0.15:
            words.insert(r.randrange(len(words)), str(r.randint(0, 5000)))
        words[0] = words[0].capitalize()
        return " ".join(words) + r.choice((".", ".", ".", ":", "?", "!"))

    def _math_line(self) -> str:
        r = self.rng
        a, b, c, n = r.randint(2, 99), r.randint(1, 999), r.randint(1, 50), r.randint(2, 12)
        v = r.choice("xyznkmab")
        return r.choice(
            (
                f"$${a}{v}^{{{n}}} + {b}{v} - {c} = 0$$",
                f"$\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{n}}} = \\frac{{{a * n + b * c}}}{{{b * n}}}$",
                f"$\\sum_{{{v}=1}}^{{{b}}} {v}^{{{n}}} \\equiv {c} \\pmod{{{a}}}$",
                f"Let ${v} = {a}$, then ${v}^2 - {b} = {a * a - b}$.",
                f"$\\binom{{{a}}}{{{n}}} = {b * c}$ and ${c}! / {n}!$ simplifies.",
                f"$$\\int_0^{{{n}}} {a}{v}^{{{c}}}\\,d{v} = \\frac{{{a} \\cdot {n}^{{{c + 1}}}}}{{{c + 1}}}$$",
                f"$\\sqrt{{{a * a + b}}} \\approx {(a * a + b) ** 0.5:.4f}$",
                f"$\\gcd({a * c}, {b * c}) = {c} \\cdot \\gcd({a}, {b})$",
            )
        )

    def _code_line(self) -> str:
        r = self.rng
        a, b, n = self.name(), self.name(), r.randint(0, 1000)
        indent = "    " * r.choice((0, 1, 1, 2, 2, 3))
        return indent + r.choice(
            (
                f"{a} = {b}({n}, key={r.choice(_WORD_LIST)!r})",
                f"for {a} in range({n}):",
                f"if {a} % {r.randint(2, 13)} == {r.randint(0, 12)}:",
                f"return sum({a}[i] * {b}[i] for i in range(len({a})))",
                f"import {r.choice(_PACKAGES)}",
                f"print(f\"{a}: {{{b}}}\")",
                f"def {a}({b}, n={n}):",
                f"assert {a}({n}) == {r.randint(0, 10**6)}, {b!r}",
                f"{a}.append(({b}, {n}))",
                f"with open({self.path()!r}) as fh:",
            )
        )

    def _command(self) -> str:
        r = self.rng
        p, w = self.path(), r.choice(_WORD_LIST)
        return r.choice(
            (
                f"ls -la {p.rsplit('/', 1)[0]}",
                f"cat {p}",
                f"grep -rn '{w}' /app",
                f"python3 {p}",
                f"pip install {r.choice(_PACKAGES)}=={r.randint(0, 3)}.{r.randint(0, 30)}.{r.randint(0, 9)}",
                f"make -j{r.randint(2, 16)} {w}",
                f"sed -i 's/{w}/{r.choice(_WORD_LIST)}/g' {p}",
                f"tail -n {r.randint(5, 200)} {p}",
                "git status",
                f"git log --oneline -{r.randint(3, 20)}",
                f"chmod +x {p}",
                f"curl -s http://localhost:{r.randint(1024, 9999)}/{w}",
                f"pytest -x -q tests/test_{w}.py",
                f"find / -name '*{w}*' 2>/dev/null | head",
            )
        )

    def _terminal_line(self) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.3:
            p = self.path()
            return (
                f"-rw-r--r-- 1 root root {r.randint(0, 2_000_000):>8} {r.choice(_MONTHS)} "
                f"{r.randint(1, 28):>2} {r.randint(0, 23):02d}:{r.randint(0, 59):02d} {p.rsplit('/', 1)[1]}"
            )
        if roll < 0.45:
            pkg = r.choice(_PACKAGES)
            return f"Collecting {pkg}=={r.randint(0, 3)}.{r.randint(0, 30)}.{r.randint(0, 9)} ({r.randint(10, 9000)} kB)"
        if roll < 0.6:
            return (
                f"{self.path()}:{r.randint(1, 900)}:{r.randint(1, 80)}: error: "
                f"'{self.name()}' undeclared (first use in this function)"
            )
        if roll < 0.7:
            return f'  File "{self.path()}", line {r.randint(1, 900)}, in {self.name()}'
        if roll < 0.8:
            return f"tests/test_{self.name()}.py::test_{self.name()} {r.choice(('PASSED', 'PASSED', 'FAILED'))} [{r.randint(1, 100):>3}%]"
        if roll < 0.9:
            return f"[{r.randint(0, 99999):>5}.{r.randint(0, 999999):06d}] {self.name()}: {' '.join(self.word() for _ in range(r.randint(2, 8)))}"
        return f"{r.randint(0, 10**9)} {r.random():.6f} {self.name()} {r.getrandbits(64):016x}"

    # -- per-message sampling (the hot path: keep it to a few C-level calls) --

    def take(self, pool: str, nbytes: float, sep: str = " ") -> str:
        k = max(1, round(nbytes / self._avg[pool]))
        return sep.join(self.rng.choices(self.pools[pool], k=k))

    def size(self, mean: float, sigma: float = 0.6) -> float:
        """A log-normal size with the given mean (real message sizes are heavy-tailed)."""
        return mean * self.rng.lognormvariate(-sigma * sigma / 2, sigma)


def _accumulate(values) -> Iterator[float]:
    total = 0.0
    for v in values:
        total += v
        yield total


# --- prompt templates ----------------------------------------------------------------------

PROMPT_TEMPLATES = {
    "math": (
        "You are an expert competition mathematician working in a sandboxed workspace.\n"
        "You can run shell commands and short Python scripts to check intermediate results,\n"
        "but the final answer must be derived and justified, not guessed.\n\n"
        "Guidelines:\n"
        "- Read the problem carefully and restate what is being asked.\n"
        "- Show the key steps of your reasoning; keep arithmetic explicit.\n"
        "- Use tools to verify computations when they are error-prone.\n"
        "- When you are confident, put the final answer alone inside \\boxed{{}} on the last line.\n\n"
        "Problem:\n{instruction}\n"
    ),
    "terminus": (
        "You are an AI assistant tasked with solving command-line tasks in a Linux environment. "
        "You will be given a task description and the output from previously executed commands. "
        "Your goal is to solve the task by providing batches of shell commands.\n\n"
        "Format your response as JSON with the following structure:\n\n"
        "{{\n"
        '  "analysis": "Analyze the current state based on the terminal output provided. What do you see? '
        'What has been accomplished? What still needs to be done?",\n'
        '  "plan": "Describe your plan for the next steps. What commands will you run and why? '
        'Be specific about what you expect each command to accomplish.",\n'
        '  "commands": [\n'
        "    {{\n"
        '      "keystrokes": "ls -la\\n",\n'
        '      "duration": 0.1\n'
        "    }},\n"
        "    {{\n"
        '      "keystrokes": "cd project\\n",\n'
        '      "duration": 0.1\n'
        "    }}\n"
        "  ],\n"
        '  "task_complete": true\n'
        "}}\n\n"
        "Required fields:\n"
        '- "analysis": Your analysis of the current situation\n'
        '- "plan": Your plan for the next steps\n'
        '- "commands": Array of command objects to execute\n\n'
        "Optional fields:\n"
        '- "task_complete": Boolean indicating if the task is complete (defaults to false if not present)\n\n'
        "Command object structure:\n"
        '- "keystrokes": String containing the exact keystrokes to send to the terminal (required)\n'
        '- "duration": Number of seconds to wait for the command to complete before the next command '
        "will be executed (defaults to 1.0 if not present)\n\n"
        "IMPORTANT: The text inside \"keystrokes\" will be used completely verbatim as keystrokes. "
        "Write commands exactly as you want them sent to the terminal:\n"
        "- Most bash commands should end with a newline (\\n) to cause them to execute\n"
        "- For special key sequences, use tmux-style escape sequences:\n"
        "  - C-c for Ctrl+C\n"
        "  - C-d for Ctrl+D\n\n"
        'The "duration" attribute specifies the number of seconds to wait for the command to '
        "complete (default: 1.0) before the next command will be executed. On immediate tasks "
        "(e.g., cd, ls, echo, cat) set a duration of 0.1 seconds. On commands (e.g., gcc, find, "
        "rustc) set a duration of 1.0 seconds. On slow commands (e.g., make, python3 [long running "
        "script], wget [file]) set an appropriate duration as you determine necessary.\n\n"
        "It is better to set a smaller duration than a longer duration. It is always possible to "
        "wait again if the prior output has not finished, by running {{\"keystrokes\": \"\", "
        '"duration": 10.0}} on subsequent requests to wait longer. Never wait longer than 60 '
        "seconds; prefer to poll to see intermediate result status.\n\n"
        "Important notes:\n"
        "- Each command's keystrokes are sent exactly as written to the terminal\n"
        "- Do not include extra whitespace before or after the keystrokes unless it's part of the intended command\n"
        "- Extra text before or after the JSON will generate warnings but be tolerated\n"
        "- The JSON must be valid - use proper escaping for quotes and special characters within strings\n"
        "- Commands array can be empty if you want to wait without taking action\n\n"
        "Task Description:\n{instruction}\n\n"
        "Current terminal state:\nCurrent Terminal Screen:\n{host}:/app# \n"
    ),
    "terminus_short": (
        "You solve command-line tasks in a Linux container. Answer with JSON holding "
        '"analysis", "plan", "commands" and optionally "task_complete".\n\n'
        "Task Description:\n{instruction}\n\nCurrent terminal state:\n{host}:/app# \n"
    ),
}


# --- tasks, trials and their texts ---------------------------------------------------------


@dataclass
class _Task:
    name: str
    instruction: str
    prompt: str  # the first user message, shared by every attempt of the task
    host: str
    tests: tuple[str, ...]
    answer: str


@dataclass
class _Trial:
    task: _Task
    trial_name: str
    run_id: str
    model: str
    date: str
    messages: list[str]
    result: str | None
    verifier_output: str | None

    @property
    def n_assistant(self) -> int:
        return len(self.messages) // 2


class _Generator:
    """Draws tasks and trials for one profile. All randomness flows through self.rng in a
    fixed order, which is what makes the output reproducible."""

    def __init__(self, profile: Profile, rng: random.Random):
        self.p = profile
        self.rng = rng
        self.text = _Text(rng, profile.unicode_rate, profile.pool_lines)
        self._trial_names: set[str] = set()
        self._forced = list(profile.forced_results)

    # -- tasks --

    def tasks(self, n: int) -> list[_Task]:
        # Short names are unique even across orgs, so trial names stay distinguishable.
        short_names: set[str] = set()
        tasks = []
        for i in range(n):
            name = self._task_name(short_names)
            short_names.add(name)
            if self.p.org_every and i % self.p.org_every == 0:
                name = f"{self.rng.choice(_ORGS)}/{name}"
            tasks.append(self._task(name))
        return tasks

    def _task_name(self, taken: set[str]) -> str:
        r = self.rng
        for _ in range(20):
            if self.p.style == "math":
                name = f"{r.choice(_TASK_SOURCES)}-{r.randrange(100_000):05d}"
            else:
                name = "-".join([r.choice(_TASK_VERBS), *r.sample(_TASK_NOUNS, r.choice((1, 1, 2)))])
            if name not in taken:
                return name
        return f"{name}-{len(taken)}"  # tiny name spaces at huge scales: disambiguate

    def _task(self, name: str) -> _Task:
        t, r = self.text, self.rng
        host = f"root@{r.getrandbits(48):012x}"
        if self.p.style == "math":
            body = t.take("prose", t.size(self.p.instruction_bytes * 0.6, 0.5))
            math = t.take("math", t.size(self.p.instruction_bytes * 0.3, 0.5), "\n")
            answer = str(r.choice((r.randint(0, 999), r.randint(-99, 99), r.randint(1000, 10**6))))
            instruction = f"{body}\n\n{math}\n\n{t.take('prose', 60)} Find the value requested above."
        else:
            instruction = t.take("prose", t.size(self.p.instruction_bytes, 0.5))
            if r.random() < 0.7:
                instruction += f"\n\nThe result must be written to `{t.path()}`."
            answer = ""
        tests = tuple(f"test_{t.name()}" for _ in range(r.randint(*self.p.n_tests)))
        prompt = PROMPT_TEMPLATES[self.p.prompt_template].format(instruction=instruction, host=host)
        return _Task(name, instruction, prompt, host, tests, answer)

    # -- trials --

    def trial_name(self, task: _Task) -> str:
        # Harbor names trial directories after the task's short name (a directory name can't
        # hold the "/" of "org/name" tasks), truncated to 32 chars, plus 7 shortuuid chars.
        base = task.name.rsplit("/", 1)[-1][:32].rstrip("_-")
        while True:
            name = f"{base}__{''.join(self.rng.choices(_TRIAL_ALPHABET, k=7))}"
            if name not in self._trial_names:
                self._trial_names.add(name)
                return name

    def trial(self, task: _Task, trial_name: str, run_id: str, model: str, date: str) -> _Trial:
        result, passed = self._outcome(task)
        low, high, mode = self.p.assistant_turns
        n_assistant = max(1, round(self.rng.triangular(low, high, mode)))
        messages = [task.prompt]
        commands: list[str] = []
        for k in range(n_assistant):
            if k:
                messages.append(self._user(task, commands))
            final = k == n_assistant - 1
            text, commands = self._assistant(task, final, success=passed == len(task.tests))
            messages.append(text)
        errored = result is not None and not _is_number(result)
        if errored and self.rng.random() < 0.7:
            # The agent died (timeout, context overflow) before answering the last observation.
            messages.append(self._user(task, commands))
        verifier = self._verifier_output(task, result, passed)
        return _Trial(task, trial_name, run_id, model, date, messages, result, verifier)

    def _outcome(self, task: _Task) -> tuple[str | None, int]:
        """(result string, number of tests passed)."""
        r, p, n = self.rng, self.p, len(task.tests)
        if self._forced:
            result = self._forced.pop(0)
            if result is not None and _is_number(result):
                return result, round(float(result) * n)
            return result, 0
        roll = r.random()
        if roll < p.p_null:
            return None, 0
        if roll < p.p_null + p.p_exception:
            return r.choice(p.exceptions), 0
        if r.random() < p.p_success:
            return "1.0", n
        passed = r.randrange(n) if n > 1 else 0
        return (str(passed / n) if p.partial_reward else "0.0"), passed

    def _assistant(self, task: _Task, final: bool, success: bool) -> tuple[str, list[str]]:
        t, r, p = self.text, self.rng, self.p
        size = t.size(p.assistant_bytes)
        think = ""
        if r.random() < p.think_prob:
            think = f"<think>\n{t.take('prose', size * 0.35)}\n</think>\n\n"
            size *= 0.65
        if p.style == "math":
            parts = [t.take("prose", size * 0.5), t.take("math", size * 0.3, "\n")]
            if final:
                answer = task.answer if success else str(r.randint(0, 999))
                parts.append(f"Therefore the answer is $\\boxed{{{answer}}}$.")
                return think + "\n\n".join(parts), []
            parts.append(f"```python\n{t.take('code', size * 0.2, chr(10))}\n```")
            return think + "\n\n".join(parts), ["python3 check.py"]
        commands = [] if final else [r.choice(t.pools["cmd"]) for _ in range(r.randint(1, 3))]
        reply = {
            "analysis": t.take("prose", size * 0.5),
            "plan": t.take("prose", size * 0.3),
            "commands": [{"keystrokes": c + "\n", "duration": r.choice((0.1, 0.1, 1.0, 5.0))} for c in commands],
            "task_complete": final,
        }
        return think + json.dumps(reply, indent=2, ensure_ascii=False), commands

    def _user(self, task: _Task, commands: list[str]) -> str:
        t, r, p = self.text, self.rng, self.p
        if p.long_output_prob and r.random() < p.long_output_prob:
            size = t.size(p.long_output_bytes, 0.7)
        else:
            size = t.size(p.user_bytes)
        if p.style == "math":
            pool = "term" if r.random() < 0.5 else "math"
            return f"Tool result (bash, exit code {r.choice((0, 0, 0, 1))}):\n{t.take(pool, size, chr(10))}"
        blocks = []
        for cmd in commands or [""]:
            out = t.take("term", size / max(1, len(commands)), "\n")
            blocks.append(f"{task.host}:/app# {cmd}\n{out}")
        head = "New Terminal Output:\n\n"
        if r.random() < 0.05:
            head = "Previous response had warnings:\nWARNINGS: - Extra text detected before JSON object\n\n" + head
        return head + "\n".join(blocks) + f"\n{task.host}:/app# "

    def _verifier_output(self, task: _Task, result: str | None, passed: int) -> str | None:
        r = self.rng
        if result is None or (not _is_number(result) and r.random() < 0.5):
            return None  # the verifier never ran
        if self.p.style == "math":
            got = task.answer if passed else str(r.randint(0, 999))
            return (
                f"Extracted answer: {got}\nGround truth: {task.answer}\n"
                f"Normalized match: {bool(passed)}\n"
                f"[grader] {self.text.take('prose', 120)}\nReward: {1.0 if passed else 0.0}\n"
            )
        return self._pytest_output(task, passed)

    def _pytest_output(self, task: _Task, passed: int) -> str:
        r, t = self.rng, self.text
        n = len(task.tests)
        outcomes = [True] * passed + [False] * (n - passed)
        r.shuffle(outcomes)
        bar = "=" * 30
        lines = [
            f"{bar} test session starts {bar}",
            "platform linux -- Python 3.13.1, pytest-8.4.1, pluggy-1.6.0",
            "rootdir: /tests",
            f"collected {n} items",
            "",
            f"../tests/test_outputs.py {''.join('.' if ok else 'F' for ok in outcomes)}{' ' * 40}[100%]",
            "",
        ]
        if not all(outcomes):
            lines.append(f"{bar} FAILURES {bar}")
            for name, ok in zip(task.tests, outcomes):
                if not ok:
                    lines += [
                        f"{'_' * 20} {name} {'_' * 20}",
                        f"    def {name}():",
                        f">       assert {t.name()}({r.randint(0, 99)}) == {r.randint(0, 999)}",
                        f"E       AssertionError: {t.take('prose', 80)}",
                        f"/tests/test_outputs.py:{r.randint(10, 300)}: AssertionError",
                    ]
        lines.append(f"{bar} short test summary info {bar}")
        for name, ok in zip(task.tests, outcomes):
            lines.append(f"{'PASSED' if ok else 'FAILED'} ../tests/test_outputs.py::{name}")
        counts = ", ".join(
            s for s in (f"{n - passed} failed" if n - passed else "", f"{passed} passed" if passed else "") if s
        )
        lines.append(f"{bar} {counts} in {r.uniform(0.05, 30):.2f}s {bar}")
        return "\n".join(lines) + "\n"


def _is_number(result: str) -> bool:
    try:
        float(result)
    except ValueError:
        return False
    return True


# --- Parquet writing -----------------------------------------------------------------------


class _ShardWriter:
    """Streams rows into one Parquet file, a row group at a time, so memory stays bounded by
    the row group and not the shard. Rows of a trial share the same Python strings, so the
    `episodes="all"` prefixes cost nothing until Arrow copies them at flush time."""

    def __init__(self, path: Path, schema: pa.Schema, agent: str):
        self.schema = schema
        self.agent = agent
        self.writer = pq.ParquetWriter(path, schema, compression=COMPRESSION)
        self._reset()

    def _reset(self) -> None:
        self.offsets = [0]
        self.contents: list[str] = []
        self.roles: list[str] = []
        self.columns: dict[str, list] = {name: [] for name in self.schema.names[1:]}
        self.buffered_bytes = 0

    def add(self, trial: _Trial, n_messages: int, episode: int, text_bytes: int) -> None:
        self.contents.extend(trial.messages[:n_messages])
        self.roles.extend(ROLES[i % 2] for i in range(n_messages))
        self.offsets.append(len(self.contents))
        values = {
            "agent": self.agent,
            "model": trial.model,
            "model_provider": trial.model.split("/", 1)[0],
            "date": trial.date,
            "task": trial.task.name,
            "episode": f"episode-{episode}",
            "run_id": trial.run_id,
            "trial_name": trial.trial_name,
            "result": trial.result,
            "verifier_output": trial.verifier_output,
            "instruction": trial.task.instruction,
        }
        for name, column in self.columns.items():
            column.append(values[name])
        self.buffered_bytes += text_bytes
        if len(self.offsets) > ROW_GROUP_ROWS or self.buffered_bytes >= ROW_GROUP_TEXT_BYTES:
            self.flush()

    def flush(self) -> None:
        if len(self.offsets) == 1:
            return
        messages = pa.StructArray.from_arrays(
            [pa.array(self.contents, pa.string()), pa.array(self.roles, pa.string())],
            fields=list(self.schema.field("conversations").type.value_type),
        )
        conversations = pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), messages)
        arrays = [conversations] + [pa.array(self.columns[n], pa.string()) for n in self.schema.names[1:]]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        self.writer.write_table(table, row_group_size=table.num_rows)
        self._reset()

    def close(self) -> None:
        self.flush()
        self.writer.close()


class _Counter:
    """Totals for GeneratedInfo. Distinctness is tracked by 16-byte digests rather than the
    strings themselves, so counting 120 MB of text does not keep 120 MB alive."""

    def __init__(self) -> None:
        self.text_bytes = 0
        self.n_turns = 0
        self.distinct_text_bytes = 0
        self.distinct_message_bytes = 0
        self._seen: set[bytes] = set()
        self._seen_messages: set[bytes] = set()

    def distinct(self, text: str | None, *, message: bool) -> int:
        """Count `text` once; returns its UTF-8 size."""
        if text is None:
            return 0
        data = text.encode("utf-8")
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if digest not in self._seen:
            self._seen.add(digest)
            self.distinct_text_bytes += len(data)
        if message and digest not in self._seen_messages:
            self._seen_messages.add(digest)
            self.distinct_message_bytes += len(data)
        return len(data)


# --- the public entry point ----------------------------------------------------------------


def generate_dataset(
    out_dir: str | Path,
    profile: str = "tiny",
    *,
    episodes: str = "last",
    shards: int = 1,
    seed: int = 0,
    scale: float = 1.0,
    runs: int | None = None,
    attempts: int | None = None,
    instruction: bool | None = None,
    rl: bool | None = None,
) -> GeneratedInfo:
    """Write a synthetic Hub dataset (README.md + data/train-*.parquet) into `out_dir`.

    `scale` multiplies the number of tasks (hence trials and rows); `runs`/`attempts`
    override the profile's jobs and attempts per task; `instruction`/`rl` override whether
    the instruction column is written and whether run_id == trial_name. Any existing
    `data/train-*.parquet` in `out_dir` is removed first so stale shards cannot mix in."""
    started = time.perf_counter()
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    if episodes not in ("last", "all"):
        raise ValueError(f"episodes must be 'last' or 'all', not {episodes!r}")
    prof = PROFILES[profile]
    n_runs = prof.runs if runs is None else runs
    n_attempts = prof.attempts if attempts is None else attempts
    with_instruction = prof.instruction if instruction is None else instruction
    is_rl = prof.rl if rl is None else rl
    n_tasks = max(1, round(prof.n_tasks * scale))
    if n_runs < 1 or n_attempts < 1:
        raise ValueError("runs and attempts must be at least 1")
    n_trials = n_runs * n_tasks * n_attempts
    if not 1 <= shards <= n_trials:
        raise ValueError(f"shards must be between 1 and the number of trials ({n_trials})")

    out = Path(out_dir)
    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for stale in data_dir.glob("train-*.parquet"):
        stale.unlink()

    rng = random.Random(seed)
    gen = _Generator(prof, rng)
    tasks = gen.tasks(n_tasks)
    schema = dataset_schema(with_instruction)
    counter = _Counter()
    if with_instruction:
        for task in tasks:
            counter.distinct(task.instruction, message=True)

    files = [data_dir / f"train-{i:05d}-of-{shards:05d}.parquet" for i in range(shards)]
    run_ids: list[str] = []
    n_rows = 0
    writer: _ShardWriter | None = None
    shard = -1
    for index, trial in enumerate(_trials(gen, tasks, n_runs, n_attempts, is_rl, run_ids)):
        # Contiguous blocks of trials per shard: a trial's rows never straddle two files.
        if index * shards // n_trials != shard:
            if writer:
                writer.close()
            shard = index * shards // n_trials
            writer = _ShardWriter(files[shard], schema, prof.agent)
        n_rows += _write_trial(writer, trial, episodes, counter)
    writer.close()

    command = (
        f"python -m tools.generate OUT --profile {profile} --episodes {episodes} --shards {shards} "
        f"--seed {seed} --scale {scale} --runs {n_runs} --attempts {n_attempts} "
        f"--{'' if with_instruction else 'no-'}instruction --{'' if is_rl else 'no-'}rl"
    )
    _write_card(out, prof, command=command, episodes=episodes, n_rows=n_rows, n_trials=n_trials)
    return GeneratedInfo(
        out_dir=out,
        files=files,
        n_rows=n_rows,
        n_trials=n_trials,
        n_turns=counter.n_turns,
        text_bytes=counter.text_bytes,
        distinct_text_bytes=counter.distinct_text_bytes,
        runs=run_ids,
        profile=profile,
        episodes=episodes,
        seed=seed,
        scale=scale,
        rl=is_rl,
        instruction=with_instruction,
        n_tasks=n_tasks,
        n_runs=n_runs,
        distinct_message_bytes=counter.distinct_message_bytes,
        file_bytes=sum(f.stat().st_size for f in files),
        seconds=time.perf_counter() - started,
    )


def _trials(
    gen: _Generator, tasks: list[_Task], n_runs: int, attempts: int, rl: bool, run_ids: list[str]
) -> Iterator[_Trial]:
    """Trials in export order: job by job, task by task, attempts sorted by trial name (the
    order of the trial directories an exporter walks)."""
    rng = gen.rng
    for r in range(n_runs):
        job_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        model = gen.p.models[r % len(gen.p.models)]
        clock = datetime(2026, 1, 5, tzinfo=timezone.utc) + timedelta(seconds=rng.uniform(0, 150 * 86400))
        if not rl:
            run_ids.append(job_id)
        for task in tasks:
            for name in sorted(gen.trial_name(task) for _ in range(attempts)):
                # Trials of a job start a few seconds apart (they run concurrently).
                clock += timedelta(seconds=rng.uniform(0.2, 20))
                date = clock.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                run_id = name if rl else job_id
                if rl:
                    run_ids.append(name)
                yield gen.trial(task, name, run_id, model, date)


def _write_trial(writer: _ShardWriter, trial: _Trial, episodes: str, counter: _Counter) -> int:
    """Write the rows of one trial; returns how many."""
    # Byte sizes of each message once per trial; a prefix row's size is a cumulative sum.
    cumulative = [0]
    n_assistant = trial.n_assistant
    # With episodes="all" the last row ends at the last assistant message, so an unanswered
    # trailing user message appears in no row and must not be counted.
    emitted = trial.messages if episodes == "last" else trial.messages[: 2 * n_assistant]
    for text in emitted:
        cumulative.append(cumulative[-1] + counter.distinct(text, message=True))
    counter.distinct(trial.verifier_output, message=False)

    if episodes == "last":
        rows = [(len(trial.messages), n_assistant - 1)]
    else:
        rows = [(2 * (k + 1), k) for k in range(n_assistant)]
    for n_messages, episode in rows:
        counter.n_turns += n_messages
        counter.text_bytes += cumulative[n_messages]
        writer.add(trial, n_messages, episode, cumulative[n_messages])
    return len(rows)


def _write_card(out: Path, prof: Profile, *, command: str, episodes: str, n_rows: int, n_trials: int) -> None:
    card = f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
tags:
- synthetic
- agent-trajectories
- harbor
---

# Synthetic Harbor traces: `{prof.name}` profile

{prof.description}

Generated by the trajectory warehouse's synthetic data generator:

    {command}

It has the columns and layout of a `harbor traces export` dataset (one row per episode,
`conversations` as a list of `{{content, role}}` messages) but every text in it is random:
it exists to test and benchmark ingestion.

- rows: {n_rows}
- trials: {n_trials}
- agent: {prof.agent}
- episodes: {episodes}
"""
    (out / "README.md").write_text(card, encoding="utf-8")


# --- CLI -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory (README.md and data/ are written inside)")
    parser.add_argument("--profile", default="tiny", choices=sorted(PROFILES))
    parser.add_argument("--episodes", default="last", choices=("last", "all"))
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=None, help="override the profile's number of runs")
    parser.add_argument("--attempts", type=int, default=None, help="override attempts per task")
    parser.add_argument("--instruction", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--rl", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args(argv)
    try:
        info = generate_dataset(
            args.out,
            args.profile,
            episodes=args.episodes,
            shards=args.shards,
            seed=args.seed,
            scale=args.scale,
            runs=args.runs,
            attempts=args.attempts,
            instruction=args.instruction,
            rl=args.rl,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(info.summary(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
