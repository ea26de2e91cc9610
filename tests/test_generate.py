"""The synthetic Hub-dataset generator: layout, schema, counts, and the properties of real
`harbor traces export` output that ingestion relies on."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tools import generate
from tools.generate import PROFILES, GeneratedInfo, generate_dataset

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples" / "sample"
SCALAR_COLUMNS = [
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
]


def read_rows(info: GeneratedInfo) -> list[dict]:
    rows = []
    for path in info.files:
        rows += pq.read_table(path).to_pylist()
    return rows


def by_trial(rows: list[dict]) -> dict[str, list[dict]]:
    trials = defaultdict(list)
    for row in rows:
        trials[row["trial_name"]].append(row)
    return trials


def episode_index(row: dict) -> int:
    match = re.fullmatch(r"episode-(\d+)", row["episode"])
    assert match, row["episode"]
    return int(match.group(1))


def utf8(text: str) -> int:
    return len(text.encode("utf-8"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[GeneratedInfo, list[dict]]:
    info = generate_dataset(tmp_path_factory.mktemp("tiny"), "tiny")
    return info, read_rows(info)


@pytest.fixture(scope="module")
def tiny_all(tmp_path_factory) -> tuple[GeneratedInfo, list[dict]]:
    info = generate_dataset(tmp_path_factory.mktemp("tiny_all"), "tiny", episodes="all")
    return info, read_rows(info)


@pytest.fixture(scope="module")
def tb_small(tmp_path_factory) -> tuple[GeneratedInfo, list[dict]]:
    info = generate_dataset(tmp_path_factory.mktemp("tb"), "tb", scale=0.1)
    return info, read_rows(info)


# --- layout and determinism ----------------------------------------------------------------


def test_layout_and_dataset_card(tiny):
    info, _ = tiny
    assert info.files == [info.out_dir / "data" / "train-00000-of-00001.parquet"]
    card = (info.out_dir / "README.md").read_text(encoding="utf-8")
    front_matter = card.split("---\n")[1]
    assert "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n" in front_matter
    assert info.file_bytes == info.files[0].stat().st_size


def test_same_seed_same_bytes_different_seed_different(tmp_path):
    for kwargs in ({"profile": "tiny"}, {"profile": "tb", "scale": 0.1, "episodes": "all", "shards": 2}):
        a = generate_dataset(tmp_path / "a", **kwargs)
        b = generate_dataset(tmp_path / "b", **kwargs)
        c = generate_dataset(tmp_path / "c", seed=1, **kwargs)
        for fa, fb, fc in zip(a.files, b.files, c.files):
            assert fa.read_bytes() == fb.read_bytes()
            assert fa.read_bytes() != fc.read_bytes()
        assert (tmp_path / "a" / "README.md").read_bytes() == (tmp_path / "b" / "README.md").read_bytes()
        assert a.runs == b.runs != c.runs


def test_regenerating_into_a_directory_removes_stale_shards(tmp_path):
    generate_dataset(tmp_path, "tiny", shards=3)
    info = generate_dataset(tmp_path, "tiny", shards=2)
    assert sorted((tmp_path / "data").iterdir()) == info.files
    assert [f.name for f in info.files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]


def test_committed_sample_matches_the_generator(tmp_path):
    info = generate_dataset(tmp_path, "tiny", seed=0)
    sample = SAMPLE_DIR / "data" / "train-00000-of-00001.parquet"
    # Compare contents rather than bytes: the file embeds the pyarrow version that wrote it.
    assert pq.read_table(sample).equals(pq.read_table(info.files[0]))
    assert (SAMPLE_DIR / "README.md").read_text() == (tmp_path / "README.md").read_text()
    assert sample.stat().st_size < 200_000


# --- schema --------------------------------------------------------------------------------


def check_schema(schema: pa.Schema, instruction: bool) -> None:
    expected = ["conversations", *SCALAR_COLUMNS] + (["instruction"] if instruction else [])
    assert schema.names == expected
    conversations = schema.field("conversations").type
    assert pa.types.is_list(conversations)
    message = conversations.value_type
    assert pa.types.is_struct(message)
    assert [(f.name, f.type) for f in message] == [("content", pa.string()), ("role", pa.string())]
    for name in expected[1:]:
        assert schema.field(name).type == pa.string(), name
        assert schema.field(name).nullable


def test_schema_has_exactly_the_export_columns(tiny, tb_small, tmp_path):
    check_schema(pq.read_schema(tiny[0].files[0]), instruction=True)
    # Eval exports lack the instruction column; the override adds or removes it.
    check_schema(pq.read_schema(tb_small[0].files[0]), instruction=False)
    with_instruction = generate_dataset(tmp_path / "a", "tb", scale=0.05, instruction=True)
    check_schema(pq.read_schema(with_instruction.files[0]), instruction=True)
    without = generate_dataset(tmp_path / "b", "tiny", instruction=False)
    check_schema(pq.read_schema(without.files[0]), instruction=False)


def test_schema_metadata_names_the_features_like_the_datasets_library(tiny):
    import json

    meta = pq.read_schema(tiny[0].files[0]).metadata[b"huggingface"]
    features = json.loads(meta)["info"]["features"]
    assert list(features) == ["conversations", *SCALAR_COLUMNS, "instruction"]
    assert list(features["conversations"][0]) == ["content", "role"]


# --- counts --------------------------------------------------------------------------------


def check_counts(info: GeneratedInfo, rows: list[dict]) -> None:
    assert info.n_rows == len(rows)
    assert info.n_trials == len(by_trial(rows))
    assert info.n_turns == sum(len(r["conversations"]) for r in rows)
    assert info.text_bytes == sum(utf8(m["content"]) for r in rows for m in r["conversations"])
    distinct = {m["content"] for r in rows for m in r["conversations"]}
    distinct |= {r["verifier_output"] for r in rows if r["verifier_output"] is not None}
    distinct |= {r["instruction"] for r in rows if r.get("instruction") is not None}
    assert info.distinct_text_bytes == sum(map(utf8, distinct))


def test_tiny_counts_match_info_and_profile(tiny):
    info, rows = tiny
    prof = PROFILES["tiny"]
    assert info.n_trials == info.n_rows == prof.runs * prof.n_tasks * prof.attempts
    assert info.n_tasks == len({r["task"] for r in rows}) == prof.n_tasks
    check_counts(info, rows)
    for trial in by_trial(rows).values():
        (row,) = trial  # episodes="last": one row per trial
        assert 4 <= len(row["conversations"]) <= 9


def test_tb_counts_match_info_and_profile(tb_small):
    info, rows = tb_small
    prof = PROFILES["tb"]
    assert info.n_tasks == round(prof.n_tasks * 0.1)
    assert info.n_rows == info.n_trials == prof.runs * info.n_tasks * prof.attempts
    check_counts(info, rows)
    turns = [len(r["conversations"]) for r in rows]
    assert min(turns) >= 16 and max(turns) <= 61
    assert {r["agent"] for r in rows} == {"terminus-2"}
    # The long prompt template is shared by every attempt and run of a task.
    prompts = defaultdict(set)
    for r in rows:
        prompts[r["task"]].add(r["conversations"][0]["content"])
    assert all(len(p) == 1 for p in prompts.values())
    assert all(len(next(iter(p))) > 3000 for p in prompts.values())


def test_all_episodes_counts_match_info(tiny_all):
    check_counts(*tiny_all)


def test_distinct_text_bytes_by_hand(tmp_path):
    # One task, one run, two attempts: the prompt and the instruction are shared, the rest
    # of each conversation is the trial's own.
    info = generate_dataset(tmp_path, "tiny", scale=1 / 6, runs=1, attempts=2)
    rows = read_rows(info)
    assert info.n_tasks == 1 and len(rows) == 2
    a, b = rows
    prompt = a["conversations"][0]["content"]
    assert b["conversations"][0]["content"] == prompt
    assert a["instruction"] == b["instruction"]
    own = lambda r: sum(utf8(m["content"]) for m in r["conversations"][1:])  # noqa: E731
    verifier = lambda r: utf8(r["verifier_output"]) if r["verifier_output"] else 0  # noqa: E731
    expected = utf8(prompt) + utf8(a["instruction"]) + own(a) + own(b) + verifier(a) + verifier(b)
    assert info.distinct_text_bytes == expected
    assert info.text_bytes == 2 * utf8(prompt) + own(a) + own(b)
    assert info.distinct_message_bytes == expected - verifier(a) - verifier(b)


def test_counter_counts_each_distinct_string_once():
    counter = generate._Counter()
    for text in ("héllo", "héllo", "日本", None):
        counter.distinct(text, message=True)
    counter.distinct("héllo", message=False)  # a verifier output equal to a message
    counter.distinct("🚀", message=False)
    assert counter.distinct_text_bytes == 6 + 6 + 4
    assert counter.distinct_message_bytes == 6 + 6


def test_scale_multiplies_trials_with_new_names(tmp_path):
    one = generate_dataset(tmp_path / "one", "tiny")
    three = generate_dataset(tmp_path / "three", "tiny", scale=3)
    assert three.n_rows == 3 * one.n_rows
    names = {r["trial_name"] for r in read_rows(three)}
    assert len(names) == three.n_trials


def test_runs_and_attempts_override_the_profile(tmp_path):
    info = generate_dataset(tmp_path, "tiny", runs=3, attempts=2)
    rows = read_rows(info)
    assert info.n_trials == 3 * PROFILES["tiny"].n_tasks * 2
    assert len(info.runs) == 3 == len({r["run_id"] for r in rows})
    per_run_task = defaultdict(int)
    for r in rows:
        per_run_task[r["run_id"], r["task"]] += 1
    assert set(per_run_task.values()) == {2}


# --- conversations and episodes ------------------------------------------------------------


def check_alternates(conversation: list[dict]) -> None:
    assert [m["role"] for m in conversation] == [("user", "assistant")[i % 2] for i in range(len(conversation))]


def test_last_episode_rows_hold_the_whole_conversation(tiny, tb_small):
    for _, rows in (tiny, tb_small):
        for row in rows:
            conversation = row["conversations"]
            check_alternates(conversation)
            n_assistant = sum(m["role"] == "assistant" for m in conversation)
            assert row["episode"] == f"episode-{n_assistant - 1}"


def test_all_episodes_rows_are_growing_prefixes(tiny_all, tmp_path):
    tb_all = generate_dataset(tmp_path, "tb", scale=0.05, episodes="all")
    for info, rows in (tiny_all, (tb_all, read_rows(tb_all))):
        assert info.n_rows > info.n_trials
        for trial in by_trial(rows).values():
            indices = [episode_index(r) for r in trial]
            assert indices == list(range(len(trial)))  # episode-0..episode-(A-1), in order
            for k, row in enumerate(trial):
                conversation = row["conversations"]
                check_alternates(conversation)
                assert len(conversation) == 2 * (k + 1)
                assert conversation[-1]["role"] == "assistant"
                if k + 1 < len(trial):
                    assert trial[k + 1]["conversations"][: len(conversation)] == conversation
            # Per-trial columns are the same on every episode row.
            for column in SCALAR_COLUMNS:
                if column != "episode":
                    assert len({r[column] for r in trial}) == 1, column


def test_all_and_last_describe_the_same_trials(tiny, tiny_all):
    last = {r["trial_name"]: r for r in tiny[1]}
    all_rows = by_trial(tiny_all[1])
    assert set(last) == set(all_rows)
    for name, trial in all_rows.items():
        whole = last[name]["conversations"]
        final = trial[-1]["conversations"]
        # The last row may additionally hold an unanswered user message (an agent that died).
        assert whole[: len(final)] == final and len(whole) - len(final) in (0, 1)
        assert trial[-1]["episode"] == last[name]["episode"]


# --- identity columns ----------------------------------------------------------------------


def test_trial_names_dates_and_eval_run_ids(tiny):
    info, rows = tiny
    assert len(info.runs) == PROFILES["tiny"].runs
    assert [r["run_id"] for r in rows if r["run_id"] in info.runs] == [r["run_id"] for r in rows]
    for run_id in info.runs:
        assert str(uuid.UUID(run_id)) == run_id
    for row in rows:
        short = row["task"].rsplit("/", 1)[-1][:32].rstrip("_-")
        assert re.fullmatch(re.escape(short) + r"__[A-Za-z0-9]{7}", row["trial_name"]), row["trial_name"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", row["date"])
        datetime.fromisoformat(row["date"].replace("Z", "+00:00"))
        assert row["model_provider"] == row["model"].split("/")[0]
    assert len({r["trial_name"] for r in rows}) == len(rows)


def test_rl_mode_uses_the_trial_name_as_run_id(tmp_path):
    math = generate_dataset(tmp_path / "math", "math", scale=0.005)
    rows = read_rows(math)
    assert math.rl and math.n_rows == math.n_tasks * PROFILES["math"].attempts
    assert all(r["run_id"] == r["trial_name"] for r in rows)
    assert math.runs == [r["trial_name"] for r in rows]
    assert {(r["agent"], r["model_provider"]) for r in rows} == {("opencode", "hosted_vllm")}
    assert all(r["instruction"] for r in rows)
    # The first user message (the rendered task prompt) is shared by a task's attempts.
    prompts = defaultdict(set)
    for r in rows:
        prompts[r["task"]].add(r["conversations"][0]["content"])
        assert r["instruction"] in r["conversations"][0]["content"]
    assert all(len(p) == 1 for p in prompts.values())

    tiny_rl = generate_dataset(tmp_path / "tiny", "tiny", rl=True)
    assert all(r["run_id"] == r["trial_name"] for r in read_rows(tiny_rl))
    not_rl = generate_dataset(tmp_path / "not", "math", scale=0.002, rl=False)
    assert {r["run_id"] for r in read_rows(not_rl)} == set(not_rl.runs) and len(not_rl.runs) == 1


def test_tiny_has_the_variety_ingestion_must_handle(tiny):
    _, rows = tiny
    results = {r["result"] for r in rows}
    assert None in results and "0.25" in results
    assert results & {"AgentTimeoutError", "ContextLengthExceededError"}
    assert any("/" in r["task"] for r in rows)
    text = "".join(m["content"] for r in rows for m in r["conversations"])
    assert re.search("[à-ÿ]", text)  # accented Latin
    assert re.search("[\u3040-\u9fff]", text)  # CJK
    assert re.search("[\U0001F300-\U0001FAFF]", text)  # emoji
    assert any(r["verifier_output"] is None for r in rows)
    assert any("passed" in (r["verifier_output"] or "") for r in rows)


# --- sharding ------------------------------------------------------------------------------


def test_shards_split_on_trial_boundaries(tmp_path):
    one = generate_dataset(tmp_path / "one", "tiny", episodes="all")
    four = generate_dataset(tmp_path / "four", "tiny", episodes="all", shards=4)
    assert [f.name for f in four.files] == [f"train-{i:05d}-of-00004.parquet" for i in range(4)]
    owner = {}
    for path in four.files:
        table = pq.read_table(path)
        assert table.num_rows > 0
        for name in set(table.column("trial_name").to_pylist()):
            assert name not in owner, f"{name} is in {owner.get(name)} and {path.name}"
            owner[name] = path.name
    # Sharding only cuts the same row sequence into files.
    assert read_rows(four) == read_rows(one)
    assert (four.n_rows, four.n_turns, four.text_bytes, four.distinct_text_bytes) == (
        one.n_rows,
        one.n_turns,
        one.text_bytes,
        one.distinct_text_bytes,
    )


def test_row_groups_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "ROW_GROUP_ROWS", 5)
    info = generate_dataset(tmp_path, "tiny")
    meta = pq.ParquetFile(info.files[0]).metadata
    assert meta.num_row_groups == 8  # 36 rows in groups of 5
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) == 5
    assert meta.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize(
    "kwargs",
    [{"profile": "nope"}, {"episodes": "some"}, {"shards": 0}, {"shards": 37}, {"runs": 0}],
)
def test_bad_arguments_are_refused(tmp_path, kwargs):
    with pytest.raises(ValueError):
        generate_dataset(tmp_path, **kwargs)


# --- CLI -----------------------------------------------------------------------------------


def test_cli_writes_a_dataset_and_prints_a_summary(tmp_path, capsys):
    assert generate.main([str(tmp_path), "--profile", "tiny", "--episodes", "all", "--shards", "2", "--seed", "3"]) == 0
    err = capsys.readouterr().err
    assert "rows:" in err and "distinct text bytes:" in err
    assert len(list((tmp_path / "data").glob("train-*-of-00002.parquet"))) == 2
    expected = generate_dataset(tmp_path / "again", "tiny", episodes="all", shards=2, seed=3)
    assert read_rows(expected) == [r for f in sorted((tmp_path / "data").iterdir()) for r in pq.read_table(f).to_pylist()]
