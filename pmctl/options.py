"""The arguments and options pmctl's commands share, declared once as
Annotated types: the PID, --json, --db (with $PMM_DB), the hook's settings
(--depth, --sample, --buffer) and the duration options' parsers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pmm.kernel import uapi
from pmm.output import dump_json
from pmm.units import format_duration, parse_duration, parse_size

DURATION_FORMS = "100ms, 5s, 2m, 1h; a bare number is seconds"
DB_HELP = ("pmd's database (default: $PMM_DB, else the system database /var/lib/pmm/pmm.db "
           "when this user may read it, else ~/.local/share/pmm/pmm.db")

PidArg = Annotated[
    int, typer.Argument(help="Process id (the tgid).", min=1, metavar="PID", show_default=False)
]
JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON document with stable keys instead of a table."),
]


def db_option(help_: str = f"{DB_HELP}).") -> Any:
    """--db: a path that need not be readable (the store's error says why
    not), $PMM_DB when not given."""
    return typer.Option("--db", envvar="PMM_DB", metavar="PATH", show_default=False,
                        readable=False, help=help_)


DbOpt = Annotated[Path | None, db_option()]
# leaks, stats and alerts say whose the user's database is
DbOptUser = Annotated[Path | None, db_option(f"{DB_HELP}, where a pmd of this user writes).")]


# -- the hook's settings, for `run` and `attach` -----------------------------

# the frames a command shows per site (leaks, unreachable)
ShownDepthOpt = Annotated[
    int,
    typer.Option("--depth", help="Frames shown per site (1 = the allocating call only).",
                 min=1, max=32),
]
DepthOpt = Annotated[
    int | None,
    typer.Option("--depth", help="Frames recorded per site, 1-32 (PMM_DEPTH).", min=1, max=32,
                 show_default=False),
]


def sample_bytes(value: str | int) -> int:
    """--sample's size (pmm.units.parse_size: 4096, 512K, 1M), at least 1 byte."""
    try:
        n = value if isinstance(value, int) else parse_size(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if n < 1:
        raise typer.BadParameter(f"{value} is not a sampling size: give 1 byte or more")
    return n


SampleOpt = Annotated[
    int | None,
    typer.Option("--sample", parser=sample_bytes, metavar="SIZE", show_default=False,
                 help="Sampled tracking: on average one record per SIZE allocated "
                 "(4096, 512K, 1M; K = 1024; PMM_SAMPLE)."),
]
BufferOpt = Annotated[
    int | None,
    typer.Option("--buffer", help="Records each thread buffers before sending, 512-32768 "
                 "(PMM_BUFFER; default 32768, 1.5 MiB a thread at most: fewer use less memory "
                 "and more cpu).", min=512, max=32768, show_default=False),
]


# -- durations ---------------------------------------------------------------

def duration_parser(minimum: float | None = None, maximum: float | None = None, *,
                    zero_ok: bool = False,
                    out_of_range: str = "{text} is out of range: {bounds}",
                    ) -> Callable[[str | float], float]:
    """A typer parser of a duration option in seconds (pmm.units.parse_duration
    and its range); what it refuses is a usage error saying what is
    accepted. A default that is already a number is taken as it is."""

    def parse(value: str | float) -> float:
        if isinstance(value, float | int):
            return float(value)
        try:
            return parse_duration(value, minimum, maximum, zero_ok=zero_ok,
                                  out_of_range=out_of_range)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None

    return parse


duration_seconds = duration_parser()


def duration_in(per_second: int, lo: int, hi: int | None) -> Callable[[str | int], int]:
    """A typer parser for a duration option whose value the library takes as
    a whole number of 1/per_second seconds (1000: milliseconds) between lo and
    hi (None: no bound; else the module's range). A default (an int) is
    taken as it is."""
    parse = duration_parser(lo / per_second, None if hi is None else hi / per_second,
                            out_of_range="{text} is out of range: the module accepts {bounds}"
                            if hi is not None else "{text} is out of range: {bounds}")

    def in_units(value: str | int) -> int:
        return value if isinstance(value, int) else round(parse(value) * per_second)

    return in_units


INTERVAL_MS = duration_in(1000, uapi.INTERVAL_MIN_MS, uapi.INTERVAL_MAX_MS)
EXITED_TTL_S = duration_in(1, uapi.EXITED_TTL_MIN_S, uapi.EXITED_TTL_MAX_S)
ATTACH_TIMEOUT_MS = duration_in(1000, 1, None)


def interval_option(help_: str) -> Any:
    """--interval of start and config: the module's sampling interval."""
    return typer.Option(
        "--interval", parser=INTERVAL_MS, metavar="DURATION", show_default=False,
        help=f"{help_} ({DURATION_FORMS}; "
        f"{format_duration(uapi.INTERVAL_MIN_MS / 1000)} to "
        f"{format_duration(uapi.INTERVAL_MAX_MS / 1000)}).",
    )


# -- refusals and output -----------------------------------------------------

def refuse(option: str, why: str) -> typer.BadParameter:
    """A usage error for an option that does not apply."""
    return typer.BadParameter(why, param_hint=f"'{option}'")


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the option was given on the command line (not a default or $ENV)."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def echo_json(obj: Any) -> None:
    typer.echo(dump_json(obj))


def now_monotonic_ns() -> int:
    """The blocks' clock (CLOCK_MONOTONIC): their ages are measured from it."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
