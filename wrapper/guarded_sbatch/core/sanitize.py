"""Everything shown is sanitised: a name, tag, key, log line or path comes from files a co-worker may write (a tag
appended to an event file, a key of a reference config), and a terminal obeys the escape sequences in it
(`ESC]0;TITLE`, `ESC[2J`, a carriage return that hides the line before, a right-to-left override that reverses a
path). `visible()` renders each such character as its escape (`\\x1b`, `\\r`, `\\u202e`) so people see it instead of
their terminal acting on it. It is applied where text leaves for a terminal or a file people read: the CLI's
stdout and stderr (cli/main.py), the project note, the evidence and the alerts.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, and the invisible bidirectional marks and overrides
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_LINE = re.compile(f"[{_CONTROLS}\t\n]")
# colours and bold (the pre-flight report's tags, `status`'s header): kept; any other sequence, and a concealing
# or cursor-moving one, is shown. SGR parameters: reset, bold, dim, italic, underline, reverse, their ends, colours.
_SGR = r"(?:0|1|2|3|4|7|22|23|24|27|3[0-79]|4[0-79]|9[0-7]|10[0-7])"
# 256-colour and true-colour forms (38;5;N, 48;5;N, 38;2;R;G;B), which the terminal plots (plotext) draw with
_EXTENDED = r"(?:[34]8;5;\d{1,3}|[34]8;2;\d{1,3};\d{1,3};\d{1,3})"
_OWN_COLOURS = re.compile(f"(\x1b\\[(?:(?:{_SGR}|{_EXTENDED})(?:;(?:{_SGR}|{_EXTENDED})){{0,3}})?m)|[{_CONTROLS}]")


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\t":
        return "\\t"
    if char == "\n":
        return "\\n"
    if char == "\r":
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control and bidirectional-override character shown as its escape; tabs and newlines kept."""
    if not isinstance(text, str) or not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: _escape(m.group(0)), text)


def visible_line(text: str) -> str:
    """As visible(), and tabs and newlines escaped too: a name, tag, key or path shown on one line."""
    if not isinstance(text, str):
        return text
    return _UNSAFE_LINE.sub(lambda m: _escape(m.group(0)), text)


def visible_keeping_colours(text: str) -> str:
    """As visible(), keeping colour and bold codes (ESC[0m, ESC[1m, ESC[31m ...): the CLI's own tables and tags."""
    if not isinstance(text, str) or not _UNSAFE.search(text):
        return text
    return _OWN_COLOURS.sub(lambda m: m.group(1) or _escape(m.group(0)), text)
