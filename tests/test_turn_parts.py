"""warehouse.turn_parts: a turn's text as text, thinking and tool-call parts, losing nothing."""

from __future__ import annotations

import json
import random

from warehouse.turn_parts import Part, split_turn


def harbor_step(reasoning, message, calls):
    """An agent step as Harbor's exporter writes it (shared notes, §4.4)."""
    parts = [f"<think>{reasoning}</think>"] if reasoning is not None else []
    parts.append(message)
    parts += ["<tool_call>\n" + json.dumps({"name": fn, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
              for fn, args in calls]
    return "\n".join(parts)


def kinds(parts):
    return [(p.kind, p.text) for p in parts if p.text.strip()]


def test_a_harbor_step_splits_into_its_parts():
    content = harbor_step("plan: list files", "Let me look.", [("bash", {"cmd": "ls -la"}), ("read", {"path": "/a b"})])
    parts = split_turn(content)
    assert "".join(p.raw for p in parts) == content
    assert kinds(parts) == [("thinking", "plan: list files"), ("text", "\nLet me look.\n"),
                            ("tool_call", '{"name": "bash", "arguments": {"cmd": "ls -la"}}'),
                            ("tool_call", '{"name": "read", "arguments": {"path": "/a b"}}')]
    calls = [p for p in parts if p.kind == "tool_call"]
    assert [(c.name, c.arguments) for c in calls] == [("bash", {"cmd": "ls -la"}), ("read", {"path": "/a b"})]
    assert parts[0].raw == "<think>plan: list files</think>"


def test_odd_texts():
    assert split_turn(None) == [] and split_turn("") == []
    assert split_turn("plain") == [Part("text", "plain", "plain")]
    # A `</think>` with nothing opening it: everything before it was thinking.
    assert kinds(split_turn("reasoning here</think>answer")) == [("thinking", "reasoning here"), ("text", "answer")]
    # Unclosed tags run to the end.
    assert kinds(split_turn("a<think>cut off")) == [("text", "a"), ("thinking", "cut off")]
    unclosed = split_turn('x<tool_call>{"name": "f", "arguments": {}}')
    assert (unclosed[-1].kind, unclosed[-1].name, unclosed[-1].arguments) == ("tool_call", "f", {})
    # A <think> inside thinking is thinking; a tool call inside thinking stays thinking.
    assert kinds(split_turn("<think>a<think>b<tool_call>{}</tool_call></think>c")) == [
        ("thinking", "a<think>b<tool_call>{}</tool_call>"), ("text", "c")]
    # JSON that does not parse, or parses to no call: shown as it is.
    bad = split_turn("<tool_call>\nnot json\n</tool_call>")[0]
    assert (bad.kind, bad.text, bad.name, bad.arguments) == ("tool_call", "not json", None, None)
    assert split_turn("<tool_call>[1, 2]</tool_call>")[0].name is None
    # Arguments sent as a JSON object's text (OpenAI's API) are parsed.
    openai = split_turn('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')[0]
    assert (openai.name, openai.arguments) == ("f", {"a": 1})
    # NUL and other control characters are plain text.
    assert kinds(split_turn("\x00<think>\x00</think>\x1b")) == [
        ("text", "\x00"), ("thinking", "\x00"), ("text", "\x1b")]
    # Deeply nested JSON does not raise.
    deep = split_turn("<tool_call>" + "[" * 100_000 + "</tool_call>")[0]
    assert deep.name is None


def test_huge_texts_split_in_linear_time():
    # 100,000 tool calls and no <think> (a scan that looked for the next <think> again after
    # each call would read the rest of the text 100,000 times), then 100,000 half tags (the shape
    # that makes a backtracking pattern quadratic) and an unclosed <think>.
    content = "<tool_call>{}</tool_call>" * 100_000 + "<think <tool_call " * 100_000 + "<think>" + "x" * 1_000_000
    parts = split_turn(content)
    assert "".join(p.raw for p in parts) == content
    assert [p.kind for p in parts[-3:]] == ["tool_call", "text", "thinking"] and len(parts) == 100_002


FRAGMENTS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<think", "tool_call>", "<", ">", "/",
             "\n", " ", "\x00", "a", "é", "{", "}", '"name"', ":", '"f"', ",", '"arguments"', "{}", "[", "]",
             '{"name": "f", "arguments": {"x": 1}}', "\ud800"]


def test_parts_always_join_back_to_the_text():
    rng = random.Random(28)
    for _ in range(20_000):
        content = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randrange(0, 30)))
        parts = split_turn(content)
        assert "".join(p.raw for p in parts) == content, content
        for p in parts:
            assert p.raw and p.kind in ("text", "thinking", "tool_call")
            if p.kind == "text":
                assert p.text == p.raw
            elif p.kind == "thinking":
                assert p.text in p.raw
            else:
                assert p.raw.startswith("<tool_call>") and p.text == p.text.strip()
                assert (p.name is None) <= (p.arguments is None)
        # No two text parts in a row: text runs between tags are whole.
        assert all(not (a.kind == b.kind == "text") for a, b in zip(parts, parts[1:]))
