"""Strings from monitored processes, made safe for people to read.

comm, exe, cmdline, mapped object paths, and the file and function names a
program registers through pmm_hooks.h are chosen by that program: one can
name itself "\\x1b]0;pwned\\x07" and retitle, recolour or rewrite the terminal
of whoever runs pmctl or reads pmd's log. `printable` escapes what a
terminal would interpret; tables, headers and log lines go through it. JSON
output stays raw (JSON escapes control characters itself).
"""

from __future__ import annotations


def _escape(c: str) -> str:
    if c == "\\":
        return "\\\\"
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    if n < 0x10000:
        return f"\\u{n:04x}"
    return f"\\U{n:08x}"


def printable(s: str) -> str:
    """`s` with every character a terminal would not print as itself escaped:
    C0 controls, DEL, C1 controls (U+0080-U+009F), and the other characters
    Python does not call printable (format characters such as bidirectional
    overrides, separators, surrogates, unassigned code points) as \\xNN,
    \\uNNNN or \\UNNNNNNNN; a backslash is doubled, so an escape in the
    output always means an escaped character."""
    if s.isprintable() and "\\" not in s:
        return s
    return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in s)
