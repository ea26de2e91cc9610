"""Making stored text safe to print on a terminal."""

from __future__ import annotations

import re

# C0 controls other than newline and tab, and DEL: an agent's terminal output is full of
# escape sequences and carriage returns that would repaint the reader's own terminal.
# C1 controls too (U+009B is a one-character CSI to some terminals): they have no control
# pictures, so they are shown as their code, <U+009B>.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Lone surrogates (exact texts may hold them) cannot be encoded for any terminal.
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with each control character shown as its Unicode control picture (ESC as ␛,
    NUL as ␀; a C1 control as <U+0080>) and each lone surrogate as U+FFFD."""
    text = _CONTROL.sub(_picture, text)
    return _SURROGATE.sub("\ufffd", text)


def _picture(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else f"<U+{code:04X}>"
