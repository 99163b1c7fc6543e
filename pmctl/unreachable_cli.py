"""`pmctl unreachable PID`: the blocks a running process can no longer reach,
by call site (pmm.unreachable; pmm-scan does the work).

--json prints {"pid", "comm", "age_s", "snapshot_ns", "stop": {"threads",
"longest_us", "all_stopped_us", "clone_us"}, "scan": {"us", "roots_bytes",
"objects_bytes", "read_bytes"}, "table": {"blocks", "bytes",
"pending_allocs", "pending_frees", "after_snapshot", "freed_meanwhile",
"unmapped", "freed_in_heap", "demoted", "overlapping", "buffers_unlisted"},
"heap": {"allocator", "walked", "unwalkable", "free_chunks", "cached_chunks",
"uncopied_bytes"}, "totals": {"reachable", "via_unknown", "young",
"held_by_young", "definite", "indirect", "unknown": {"blocks", "bytes"}},
"sites": [{"site", "definite": {"blocks", "bytes"}, "indirect": {...},
"source", "func", "file", "line", "object", "offset", "where", "example":
{"ptr", "size", "definite", "age_s", "hex", "text"}, "frames": [...]}]}
(sites worst first: most bytes definitely lost; frames as `pmctl leaks`
gives them). Exit status: 0 scanned (lost blocks or not), else
pmctl/exitcodes.py's (30-36 pmm-scan's refusals).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from pmctl.exitcodes import handle_errors
from pmctl.options import JsonOpt, PidArg, ShownDepthOpt, duration_parser
from pmctl.paths import check_output
from pmm.output import dump_json
from pmm.unreachable import MIN_AGE_S

# blocks younger than this are not judged (pmm.unreachable.MIN_AGE_S)
AGE = duration_parser(MIN_AGE_S, out_of_range="{text} is too young: at least {minimum} (the "
                      "hook's stamps run a few jiffies off the clock)")


@handle_errors
def unreachable_command(
    pid: PidArg,
    age: Annotated[
        float,
        typer.Option("--age", parser=AGE, metavar="DURATION", show_default=False,
                     help="Blocks younger than this are not judged: a pointer to them may be "
                     "in flight (default 1s; 100ms, 5s, 2m; at least 50ms)."),
    ] = 1.0,
    depth: ShownDepthOpt = 1,
    limit: Annotated[
        int,
        typer.Option("--limit", help="Show the N worst sites (0: all).", min=0, metavar="N"),
    ] = 20,
    pprof: Annotated[
        Path | None,
        typer.Option("--pprof", metavar="FILE", show_default=False, dir_okay=False,
                     help="Also write the lost blocks as a pprof profile (lost and indirect "
                     "objects and bytes per call chain: go tool pprof FILE), every site."),
    ] = None,
    allow_seccomp: Annotated[
        bool,
        typer.Option("--allow-seccomp",
                     help="Scan a process with a seccomp filter all the same (the filter "
                     "may refuse the clone, or kill the process for it)."),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Show PID's blocks that nothing reaches any more, by call site: definitely lost.

    The process keeps running: its threads are stopped for as long as it
    takes to copy their registers and fork a copy of it that never runs
    (under a millisecond for small processes), and the copy is scanned
    conservatively, as valgrind's leak check does at exit: registers, stacks
    and writable data are roots, every word pointing into a block keeps it.
    A block only lost blocks point to is indirectly lost. Needs exact mode
    (`pmctl attach` or `pmctl run` without --sample) and ptrace permission.
    """
    from pmm import unreachable as un
    from pmm.kernel.device import Device
    from pmm.run import find_hooklib

    if pprof is not None:
        check_output(pprof, "'--pprof'", "lost.pb.gz", renamed_over=True)
    hooklib = find_hooklib()
    with Device.open() as dev:
        report = un.from_module(dev, pid, hooklib, age_s=age, allow_seccomp=allow_seccomp)
    if pprof is not None:
        from pmm.pprof import LOST_DEFAULT_SAMPLE_TYPE, LOST_SAMPLE_TYPES, write_profile

        write_profile(pprof, un.pprof_samples(report), period=1, time_ns=time.time_ns(),
                      comments=[f"pmctl unreachable {pid} ({report.comm})"],
                      sample_types=LOST_SAMPLE_TYPES,
                      default_sample_type=LOST_DEFAULT_SAMPLE_TYPE)
    if json_:
        typer.echo(dump_json(report.to_dict(depth)))
        return
    typer.echo(un.render(report, depth=depth, limit=limit))
    if pprof is not None:
        typer.echo(f"pprof profile written to {pprof}")
