"""Text bound for a terminal: control characters are shown, never sent.

Job payloads, errors, tracebacks, progress messages and every name an application chooses
(queues, schedules, batches, worker labels) may come from its end users. Written to a
terminal as they are, ESC and the other control characters move the cursor, erase lines,
set the window title or write the clipboard (OSC 52); bidi overrides reorder what the
operator reads. ``terminal_safe`` is the one rendering of such text for human eyes (the CLI's
tables, listings and error lines, ``taskq top``, the worker's console log lines); JSON output
is not a terminal rendering and keeps every value as stored.

What ``terminal_safe`` shows instead of the character itself, in Python's escape notation
(lower-case hex):

- C0 controls (U+0000-U+001F) except newline and tab, DEL and the C1 controls (U+0080-U+009F):
  ``\\xNN`` (ESC is ``\\x1b``, NUL ``\\x00``, a carriage return ``\\x0d`` unless it ends a
  line: CRLF stays a line break);
- the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): ``\\uNNNN``
  (RIGHT-TO-LEFT OVERRIDE is ``\\u202e``);
- lone surrogates (U+D800-U+DFFF, which no terminal encoding can carry): ``\\uNNNN``.

Everything else is kept, backslashes included: a literal ``\\x1b`` in the text reads the same
as an escaped ESC, and ``--json`` gives the exact value.
"""

from __future__ import annotations

import re

# A carriage return is unsafe unless a newline follows it (CRLF ends a line).
_UNSAFE = re.compile(
    "\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_SURROGATES = range(0xD800, 0xE000)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _dropped(match: re.Match[str]) -> str:
    return "\ufffd" if ord(match.group()) in _SURROGATES else ""


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown in its escaped form."""
    return _UNSAFE.sub(_escaped, text)


def without_terminal_controls(text: str) -> str:
    """The last line of defence where text is already laid out (a rendered segment): the
    characters ``terminal_safe`` escapes are dropped (they take no cell) and a lone
    surrogate becomes U+FFFD (it takes one), so the layout holds and nothing is sent."""
    return _UNSAFE.sub(_dropped, text)
