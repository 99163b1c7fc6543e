"""Durations, sizes and rates as people write and read them.

Every duration option of pmctl and pmd goes through `parse_duration`: a
number with a unit (`100ms`, `5s`, `2m`, `1h`, `1.5s`), and a bare number
means seconds, whatever the option. Sizes and rates print in binary units
(`human_bytes`, `human_rate`); JSON carries exact bytes and seconds instead.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|min|h|d)?\s*", re.IGNORECASE)
_SECONDS_PER = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str, minimum: float | None = None, maximum: float | None = None,
                   *, zero_ok: bool = False,
                   out_of_range: str = "{text} is out of range: {bounds}") -> float:
    """'100ms' -> 0.1, '5s' -> 5.0, '2m' -> 120.0, '7' -> 7.0 (seconds).

    minimum and maximum (seconds, None: no bound) are the range the option
    accepts; zero_ok also accepts exactly 0 below the minimum (0: "none").
    Raises ValueError with a message that says what is accepted: for a value
    out of the range, out_of_range formatted with the text, the bounds as
    written ({minimum}, {maximum}) and {bounds} ("10ms to 1h", "at least 1ms")."""
    m = _DURATION.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a duration: write a number with a unit, "
            "e.g. 100ms, 5s, 2m, 1h (a bare number is seconds)"
        )
    seconds = float(m.group(1)) * _SECONDS_PER[(m.group(2) or "s").lower()]
    too_short = minimum is not None and seconds < minimum and not (zero_ok and seconds == 0)
    if too_short or (maximum is not None and seconds > maximum):
        lo = format_duration(minimum) if minimum is not None else None
        hi = format_duration(maximum) if maximum is not None else None
        bounds = f"{lo} to {hi}" if lo and hi else f"at least {lo}" if lo else f"at most {hi}"
        raise ValueError(out_of_range.format(text=text, minimum=lo, maximum=hi, bounds=bounds))
    return seconds


def format_duration(seconds: float) -> str:
    """A duration as parse_duration reads it back: 0.1 -> '100ms', 90 -> '90s',
    120 -> '2m', 3600 -> '1h' (the largest unit that divides it)."""
    if seconds < 1 and seconds * 1000 == int(seconds * 1000):
        return f"{int(seconds * 1000)}ms"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; exact below 1024 ('512 B')."""
    if abs(n) < 1024:
        return f"{n:.0f} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024.0
        if abs(value) < 1024.0 or unit == "TiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("not reached")


def human_rate(bytes_per_min: float) -> str:
    """A growth rate with its sign: 125337395 -> '+119.5 MiB/min'."""
    sign = "-" if bytes_per_min < 0 else "+"
    return f"{sign}{human_bytes(abs(bytes_per_min))}/min"


_SIZE = re.compile(r"\s*(\d+)\s*(?:([KMG])(?:i?B)?|B)?\s*", re.IGNORECASE)
_BYTES_PER = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """'524288' -> 524288, '512K' -> 524288, '1M' / '1MiB' -> 1048576: as the
    hook reads PMM_SAMPLE (K, M, G are powers of 1024).

    Raises ValueError with a message that says what is accepted."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size: write bytes, or with a unit, "
                         "e.g. 4096, 512K, 1M (K = 1024)")
    return int(m.group(1)) * _BYTES_PER[(m.group(2) or "").lower()]
