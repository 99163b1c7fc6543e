"""`pmctl unreachable`: the blocks a running process can no longer reach.

pmm-scan (built beside the hook library, hooklib/scan/) stops every thread
of the process for as long as it takes to copy their registers and make a
copy of the process that never runs, then marks what the copy's roots
(registers, stacks, writable data) reach, conservatively, with the module's
block table as the heap; the process runs on meanwhile. A block nothing
reaches is definitely lost, or indirectly lost when only other lost blocks
point to it (valgrind memcheck's categories and clique rule). Blocks younger
than the age gate are not judged (a pointer may be in flight); memory in use
that the table does not know (blocks from before monitoring, glibc's own) is
traced through, never called lost.

`scan` runs pmm-scan and returns its JSON; `from_module` adds the process's
name and each lost site's call chain (symbolized as `pmctl leaks` does);
`render` is the table people read, `UnreachableReport.to_dict` the JSON
machines do, `pprof_samples` the pprof profile's samples (lost and indirect
objects and bytes per site). pmm-scan's refusals become typed errors.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmm.errors import NoSuchPid, NotMonitored, PermissionDenied, PmmError
from pmm.pprof import LostSample
from pmm.text import printable
from pmm.units import format_duration, human_bytes

if TYPE_CHECKING:
    from pmm.kernel.device import Device

SCAN_NAME = "pmm-scan"
DEFAULT_AGE_S = 1.0
MIN_AGE_S = 0.05  # pmm-scan's AGE_MIN_MS: the hook's stamps run a few jiffies off
EXAMPLE_BYTES = 32
SCAN_TIMEOUT_S = 900  # pmm-scan gives its sweep 600 s


class ScanFailure(Enum):
    """Why pmm-scan refused (its exit codes, hooklib/scan/exit_codes.h)."""

    TRACED = 5  # traced already: a debugger, an attach in progress
    STATIC = 6  # statically linked: no hook can be in it
    NOT_EXACT = 8  # not in exact mode, or a hook without the scan registry
    SECCOMP = 9  # a seccomp filter (--allow-seccomp)
    NO_FORK = 10  # the copy could not be made (no room to fork, pid 1)
    NOT_STOPPED = 11  # a thread did not stop in time
    UNSUPPORTED = 13  # the kernel or the module lacks what the scan needs
    OTHER = 1


class ScanError(PmmError):
    """pmm-scan refused or failed; `failure` says why."""

    def __init__(self, message: str, failure: ScanFailure) -> None:
        super().__init__(message)
        self.failure = failure


def scan_error(returncode: int, msg: str) -> PmmError:
    """pmm-scan's refusal (its exit code, its line) as a typed error."""
    if returncode in (3, 12):
        return NoSuchPid(msg)
    if returncode == 4:
        return PermissionDenied(msg)
    if returncode == 7:
        return NotMonitored(msg)
    try:
        return ScanError(msg, ScanFailure(returncode))
    except ValueError:
        return ScanError(msg, ScanFailure.OTHER)


def find_scan(hooklib: Path) -> Path:
    """pmm-scan beside the hook library, or in libexec/pmm/ (make install)."""
    from pmm.attach import find_helper

    return find_helper(hooklib, SCAN_NAME)


CAP_SYS_PTRACE = 19
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_LOWER = 47, 2, 3


@contextlib.contextmanager
def ptrace_passed_on() -> Iterator[None]:
    """CAP_SYS_PTRACE in this thread's ambient set for as long as it runs a
    program (pmd clears its ambient capabilities so that the programs it runs
    get none: pmm-scan alone gets this one, when pmd holds it at all)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    raised = libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_PTRACE, 0, 0) == 0
    try:
        yield
    finally:
        if raised:
            libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_SYS_PTRACE, 0, 0)


def scan(pid: int, scanner: Path, dev_fd: int, age_s: float = DEFAULT_AGE_S,
         allow_seccomp: bool = False, pass_ptrace: bool = False) -> dict[str, Any]:
    """Runs pmm-scan on pid with the open device dev_fd; its JSON, or the
    typed error of its refusal. pass_ptrace: pmm-scan gets this thread's
    CAP_SYS_PTRACE, if it has it (ptrace_passed_on)."""
    argv = [str(scanner), "--device-fd", str(dev_fd), "--age", str(round(age_s * 1000))]
    if allow_seccomp:
        argv.append("--allow-seccomp")
    argv.append(str(pid))
    try:
        with ptrace_passed_on() if pass_ptrace else contextlib.nullcontext():
            r = subprocess.run(argv, capture_output=True, text=True, timeout=SCAN_TIMEOUT_S,
                               stdin=subprocess.DEVNULL, pass_fds=(dev_fd,))
    except subprocess.TimeoutExpired:
        raise ScanError(f"{SCAN_NAME} did not finish within {SCAN_TIMEOUT_S} s",
                        ScanFailure.OTHER) from None
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        msg = (lines[-1] if lines else f"{SCAN_NAME} failed (exit {r.returncode})")
        raise scan_error(r.returncode, msg.removeprefix(f"{SCAN_NAME}: "))
    return parse(r.stdout)


def parse(text: str) -> dict[str, Any]:
    """pmm-scan's JSON, checked for what the rest reads (a ScanError if not)."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ScanError(f"{SCAN_NAME} printed no JSON ({e})", ScanFailure.OTHER) from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(
            doc.get("sites"), list):
        raise ScanError(f"{SCAN_NAME}'s output is not version 1", ScanFailure.OTHER)
    return doc


def example_of(hexbytes: str) -> dict[str, str]:
    """A block's first bytes as hex pairs and as printable text ('.' for the rest)."""
    raw = bytes.fromhex(hexbytes)[:EXAMPLE_BYTES]
    return {"hex": raw.hex(" "), "text": "".join(chr(b) if 32 <= b < 127 else "." for b in raw)}


@dataclass
class UnreachableReport:
    """A scan of one process: pmm-scan's figures and its lost sites, worst
    first, each with its call chain."""

    pid: int
    comm: str
    scan: dict[str, Any]
    sites: list[dict[str, Any]] = field(default_factory=list)

    def totals(self) -> dict[str, dict[str, int]]:
        """Blocks and bytes per category (reachable ... unknown)."""
        keys = ("reachable", "via_unknown", "young", "held_by_young", "definite", "indirect",
                "unknown")
        return {k: dict(self.scan[k]) for k in keys}

    def to_dict(self, depth: int = 32) -> dict[str, Any]:
        """`pmctl unreachable --json` (see pmctl/cli.py's docstring for the keys)."""
        s = self.scan
        return {
            "pid": self.pid,
            "comm": self.comm,
            "age_s": s["age_ns"] / 1e9,
            "snapshot_ns": s["snapshot_ns"],
            "stop": dict(s["stop"]),
            "scan": dict(s["scan"]),
            "table": dict(s["table"]),
            "heap": dict(s["heap"]),
            "totals": self.totals(),
            "sites": [{**e, "frames": e["frames"][:depth]} for e in self.sites],
        }


def lost_sites(doc: Mapping[str, Any], frames: Mapping[int, Sequence[Any]],
               descs: Mapping[int, Any], now_ns: int) -> list[dict[str, Any]]:
    """pmm-scan's sites, worst first as it gives them, each with where it
    is (pmm.analysis.leaks' form: source, func, file, line, object, offset, where),
    its frames and its example's bytes (pure)."""
    from pmm.symbolize import Frame, first_user_frame

    out = []
    for e in doc["sites"]:
        site = int(e["site"])
        fr = list(frames.get(site, []))
        desc = descs.get(site)
        top = first_user_frame(fr)
        d: dict[str, Any] = {"site": site, "definite": dict(e["definite"]),
                             "indirect": dict(e["indirect"])}
        if desc is not None and (desc.file or desc.func):
            d.update(source="shim", func=desc.func or None, file=desc.file or None,
                     line=desc.line or None, object=top.object if top else None,
                     offset=top.offset if top else None,
                     where=Frame.registered_at(desc.func, desc.file, desc.line).describe())
        elif top is not None:
            d.update(source="debuginfo" if top.line else "symbol" if top.func else
                     "object" if top.object else "address", func=top.func, file=top.file,
                     line=top.line, object=top.object, offset=top.offset, where=top.describe())
        else:
            d.update(source="unknown", func=None, file=None, line=None, object=None,
                     offset=None, where="unknown site" if site == 0
                     else f"site {site} (not registered)")
        ex = e["example"]
        d["example"] = {"ptr": ex["ptr"], "size": ex["size"], "definite": ex["definite"],
                        "age_s": round(max(0, now_ns - int(ex["time_ns"])) / 1e9, 3),
                        **example_of(ex["bytes"])}
        d["frames"] = [f.as_dict() for f in fr]
        out.append(d)
    return out


def from_module(dev: Device, pid: int, hooklib: Path, age_s: float = DEFAULT_AGE_S,
                allow_seccomp: bool = False, disk_cache: bool = True,
                addresses: bool = True, pass_ptrace: bool = False) -> UnreachableReport:
    """pid scanned (pmm-scan through dev's descriptor), its lost sites
    symbolized with all their frames. disk_cache=False: the symbolizer keeps
    its answers in memory only; addresses=False: a frame the module could not
    place in a file is left unnamed rather than shown as its address (pmd,
    whose database readers are not checked for access to the process);
    pass_ptrace: see scan."""
    from pmm.kernel.uapi import MAX_FRAMES
    from pmm.sitestack import needs_map, site_frames
    from pmm.symbolize import Symbolizer, maps_for

    try:
        info = dev.require_monitored(pid)
    except NotMonitored:
        raise NotMonitored(f"pid {pid} is not monitored: a scan needs its every block, from "
                           f"the hook in exact mode (`pmctl attach {pid}`, or start it with "
                           "`pmctl run`, without --sample)") from None
    if info.state_name != "running":
        raise NoSuchPid(f"pid {pid} has exited: a scan needs it running (its live blocks "
                        f"are in `pmctl leaks {pid}`)")
    doc = scan(pid, find_scan(hooklib), dev.fd, age_s, allow_seccomp, pass_ptrace)
    wanted = {int(e["site"]) for e in doc["sites"]}
    sites = [s for s in dev.sites(pid) if s.site in wanted] if wanted else []
    objects = dev.objects(pid) if sites else []
    maps = maps_for(pid, info.start_time_ns) if addresses and needs_map(sites) else None
    frames = site_frames(sites, objects, depth=MAX_FRAMES, maps=maps, addresses=addresses,
                         symbolizer=Symbolizer(maps, disk_cache=disk_cache)) if sites else {}
    return UnreachableReport(pid=pid, comm=info.comm, scan=doc,
                             sites=lost_sites(doc, frames, {s.site: s for s in sites},
                                              int(doc["snapshot_ns"])))


# -- text ---------------------------------------------------------------------


def short_duration(s: float) -> str:
    """0.00062 -> '0.6 ms'; a second or more as pmm.units.format_duration."""
    return f"{s * 1000:.1f} ms" if s < 1 else format_duration(s)


def _n(c: Mapping[str, int], what: str = "block") -> str:
    n = int(c["blocks"])
    return f"{n} {what}{'' if n == 1 else 's'} ({human_bytes(int(c['bytes']))})"


def render(r: UnreachableReport, depth: int = 1, limit: int = 0) -> str:
    """The report as people read it: a summary, then per site (worst first)
    the lost and indirectly lost blocks and bytes, where, its first frames and
    one example block's first bytes."""
    from pmm.analysis.leakview import frames_as_text
    from pmm.output import format_table

    s = r.scan
    t = r.totals()
    lines = [
        f"pid {r.pid} ({printable(r.comm)}): {_n(t['definite'])} definitely lost, "
        f"{_n(t['indirect'])} indirectly lost, of {_n(s['table'])} in the table",
        f"  stopped {short_duration(s['stop']['longest_us'] / 1e6)} at most "
        f"({s['stop']['threads']} thread{'' if s['stop']['threads'] == 1 else 's'}), "
        f"scanned in {short_duration(s['scan']['us'] / 1e6)}; not judged: "
        f"{_n(t['young'])} younger than {format_duration(s['age_ns'] / 1e9)}"
        + (f" and {_n(t['held_by_young'])} only they reach" if t["held_by_young"]["blocks"]
           else ""),
        f"  unknown: {_n(t['unknown'], 'object')} in use that the table does not know "
        f"(traced through, never lost); heap: {s['heap']['allocator']}",
    ]
    if t["via_unknown"]["blocks"]:
        lines.append(f"  {_n(t['via_unknown'])} reachable only through unknown objects")
    sites = r.sites[:limit] if limit else r.sites
    if not sites:
        return "\n".join(lines)
    headers = ["LOST", "BLOCKS", "INDIRECT", "BLOCKS", "SITE"]
    rows: list[list[str]] = []
    for e in sites:
        rows.append([human_bytes(e["definite"]["bytes"]), str(e["definite"]["blocks"]),
                     human_bytes(e["indirect"]["bytes"]), str(e["indirect"]["blocks"]),
                     printable(e["where"])])
        if depth > 1:
            rows += [[""] * 4 + [f"  {ln}"] for ln in frames_as_text(e["frames"][:depth])]
        ex = e["example"]
        words = ex["hex"].replace(" ", "")
        grouped = " ".join(words[i:i + 16] for i in range(0, len(words), 16))
        rows.append([""] * 4 + [f"  e.g. {ex['ptr']:#x}, {ex['size']} bytes: {grouped} "
                                f"|{ex['text']}|"])
    lines.append(format_table(headers, rows, right={0, 1, 2, 3}))
    return "\n".join(lines)


# -- pprof ----------------------------------------------------------------------


def pprof_samples(r: UnreachableReport) -> list[LostSample]:
    """One sample per lost site: its frames, leaf first (a site the program
    described itself gets its function, file and line), and its definitely
    and indirectly lost objects and bytes."""
    from pmm.analysis.leakview import site_pprof_frames

    out = []
    for e in r.sites:
        out.append(LostSample(frames=site_pprof_frames(e),
                              lost_objects=e["definite"]["blocks"],
                              lost_space=e["definite"]["bytes"],
                              indirect_objects=e["indirect"]["blocks"],
                              indirect_space=e["indirect"]["bytes"]))
    return out
