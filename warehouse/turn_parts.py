"""A turn's text as the parts a viewer shows apart: text, thinking, tool calls.

Harbor's exporter writes an agent step as `"\\n".join(parts)` of `<think>{reasoning}</think>`, the
message, and one `<tool_call>\\n{"name": fn, "arguments": {...}}\\n</tool_call>` per call
(ingest reads them back as one text). split_turn undoes that for display, on any text: the parts'
`raw` slices always join back to the text, byte for byte, so nothing is lost or invented.

Read as models write, not as a grammar:
- `<think>` runs to the first `</think>` after it (a `<think>` inside is thinking too); an
  unclosed one runs to the end of the text (a reply cut off while thinking).
- A `</think>` with no `<think>` before it closes thinking that began with the text (chat
  templates that put `<think>` in the prompt): everything before it is thinking.
- `<tool_call>` runs to the first `</tool_call>` after it, or to the end when unclosed. Its inside
  is parsed as JSON; when that gives an object with a string "name", `name` and `arguments` are
  filled (an "arguments" that is itself a JSON object's text, as OpenAI's API sends it, is
  parsed too). Otherwise `name` is None and a viewer shows `text` as it is.
- Everything else is text, the newlines between Harbor's parts too (a text part may be
  whitespace only; viewers usually skip those).
The scan is linear in the text's length: str.find from a moving position, no regular expression.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class Part:
    kind: str                # "text" | "thinking" | "tool_call"
    raw: str                 # the exact slice of the turn's text, tags included
    text: str                # what to show: the raw text, the thinking inside its tags, the call's JSON stripped
    name: str | None = None  # tool_call: the function's name, when the JSON parses to one
    arguments: Any = None    # tool_call: the "arguments" value, parsed; None when the JSON does not parse


def split_turn(content: str | None) -> list[Part]:
    """The parts of a turn's text, in order; `"".join(p.raw for p in parts) == content`."""
    if not content:
        return []
    parts: list[Part] = []
    n = len(content)
    pos = 0
    # A `</think>` before any `<think>`: the text so far was thinking.
    first_close = content.find(THINK_CLOSE)
    if first_close >= 0 and not 0 <= content.find(THINK_OPEN, 0, first_close) < first_close:
        end = first_close + len(THINK_CLOSE)
        parts.append(Part("thinking", content[:end], content[:first_close]))
        pos = end
    # The next opening of each kind at or after pos, found again only once pos passes it, so no
    # stretch of text is searched twice for the same tag.
    next_think = content.find(THINK_OPEN, pos)
    next_call = content.find(CALL_OPEN, pos)
    while pos < n:
        if next_think >= 0 and next_think < pos:
            next_think = content.find(THINK_OPEN, pos)
        if next_call >= 0 and next_call < pos:
            next_call = content.find(CALL_OPEN, pos)
        opens = [i for i in (next_think, next_call) if i >= 0]
        start = min(opens) if opens else n
        if start > pos:
            parts.append(Part("text", content[pos:start], content[pos:start]))
        if start == n:
            break
        if start == next_think:
            inner_from = start + len(THINK_OPEN)
            close = content.find(THINK_CLOSE, inner_from)
            end = n if close < 0 else close + len(THINK_CLOSE)
            parts.append(Part("thinking", content[start:end], content[inner_from:n if close < 0 else close]))
        else:
            inner_from = start + len(CALL_OPEN)
            close = content.find(CALL_CLOSE, inner_from)
            end = n if close < 0 else close + len(CALL_CLOSE)
            parts.append(_tool_call(content[start:end], content[inner_from:n if close < 0 else close].strip()))
        pos = end
    return parts


def _tool_call(raw: str, inside: str) -> Part:
    try:
        call = json.loads(inside)
    except (ValueError, RecursionError):
        call = None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return Part("tool_call", raw, inside)
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
    return Part("tool_call", raw, inside, call["name"], arguments)
