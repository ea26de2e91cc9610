"""Making stored text safe to print on a terminal."""

from __future__ import annotations

import re

# C0 controls other than newline and tab, and DEL: an agent's terminal output is full of
# escape sequences and carriage returns that would repaint the reader's own terminal.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
# Lone surrogates (exact texts may hold them) cannot be encoded for any terminal.
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with each control character shown as its Unicode control picture (ESC as ␛,
    NUL as ␀) and each lone surrogate as U+FFFD."""
    text = _CONTROL.sub(lambda m: "\u2421" if m.group() == "\x7f" else chr(0x2400 + ord(m.group())), text)
    return _SURROGATE.sub("\ufffd", text)
