"""`pmctl unreachable`'s parts that need no module.

- valgrind's leak check, at the programs' exit, calls exactly the lines
  marked LOST in tests/progs/hook/unreach*.c* definitely and indirectly
  lost; tests/guest/test_unreachable.py checks that pmm, mid-run, calls the
  same lines lost: the two agree line for line.
- pmm-scan on the host, its table the hook's unsent records (the fake
  device keeps nothing, and a burst of commands stays in the buffer): the
  same counts by size, tcache chunks known as free, the program's output
  and status unchanged, no child of the scan left.
- its refusals: static, traced, seccomp, pid 1 of a namespace, sampled, no
  hook, not permitted, no room to fork (the clone refused: the target runs
  on as before).
- hostile targets (their own heap and the hook's registry made to lie) and a
  table of garbage: pmm-scan under ASan and UBSan neither crashes nor hangs.
- pmm.unreachable's pure parts: pmm-scan's JSON read, the sites described,
  the table and the pprof profile.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_env import clean_env

from pmm import unreachable as un

TOP = Path(__file__).resolve().parents[2]
SCAN = TOP / "hooklib" / "pmm-scan"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
BIN = TOP / "tests" / "progs" / "bin"
SRC = TOP / "tests" / "progs" / "hook"
ASAN = BIN / "pmm-scan-asan"
NOBODY = 65534

COMMANDS = ["req 10", "list 20", "cycle 3", "cache 100", "saw 1000", "churn 10"]


def marked(source: Path, kind: str) -> set[str]:
    out = set()
    for i, line in enumerate(source.read_text().splitlines(), 1):
        m = re.search(r"LOST: ([a-z, ]+)", line)
        if m and kind in m.group(1):
            out.add(f"{source.name}:{i}")
    return out


# -- valgrind ---------------------------------------------------------------------


def valgrind_lost(argv: list[str], stdin: str, source: str) -> dict[str, set[str]]:
    """valgrind --leak-check=full at exit: per kind, the lines of source its
    loss records' stacks first reach."""
    if shutil.which("valgrind") is None:
        pytest.skip("no valgrind (make setup installs it)")
    r = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                        *argv], input=stdin, capture_output=True, text=True, timeout=600,
                       env=clean_env())
    assert r.returncode == 0, r.stderr[-2000:]
    out: dict[str, set[str]] = {"definite": set(), "indirect": set()}
    for record in re.split(r"==\d+== \n", r.stderr):
        m = re.search(r"are (definitely|indirectly) lost in loss record", record)
        if not m:
            continue
        where = re.search(rf"\(({re.escape(source)}:\d+)\)", record)
        assert where, record
        out["definite" if m.group(1) == "definitely" else "indirect"].add(where.group(1))
    return out


def test_valgrind_calls_the_marked_lines_lost() -> None:
    got = valgrind_lost([str(BIN / "unreach")], "\n".join(COMMANDS) + "\nquit\n", "unreach.c")
    src = SRC / "unreach.c"
    assert got == {"definite": marked(src, "definite"), "indirect": marked(src, "indirect")}


def test_valgrind_calls_the_forgotten_object_lost() -> None:
    got = valgrind_lost([str(BIN / "unreach_owner")], "open 5\nquit\n", "unreach_owner.cc")
    assert got["definite"] == marked(SRC / "unreach_owner.cc", "definite") != set()


# -- pmm-scan on the host -------------------------------------------------------------


class Target:
    """A program reading commands on stdin ('ok CMD N' each), optionally as nobody."""

    def __init__(self, argv: list[str], env: dict[str, str], user: int | None = None,
                 wrap: list[str] | None = None) -> None:
        cmd = [*(wrap or []), *argv]
        if user is not None:
            cmd = ["setpriv", "--reuid", str(user), "--regid", str(user), "--clear-groups",
                   *cmd]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env)
        self.out: list[bytes] = []

    def send(self, lines: list[str]) -> None:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write("".join(f"{ln}\n" for ln in lines).encode())
        self.p.stdin.flush()
        for ln in lines:
            got = self.p.stdout.readline()
            self.out.append(got)
            assert got == f"ok {ln}\n".encode(), got

    def finish(self) -> tuple[int, bytes, bytes]:
        out, err = self.p.communicate(b"quit\n", timeout=120)
        return self.p.returncode, b"".join(self.out) + out, err


@pytest.fixture
def empty_table(tmp_path: Path) -> Path:
    p = tmp_path / "empty.blocks"
    p.write_bytes(b"")
    return p


def run_scan(pid: int, table: Path, *opts: str, scanner: Path = SCAN,
             **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(scanner), "--blocks", str(table), *opts, str(pid)],
                          capture_output=True, text=True, timeout=120, **kw)


def scan_doc(pid: int, table: Path, *opts: str) -> dict[str, Any]:
    r = run_scan(pid, table, *opts)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def by_size(doc: dict[str, Any], kind: str) -> dict[tuple[int, int], int]:
    """Sites as (blocks, bytes) of one kind -> how many sites."""
    out: dict[tuple[int, int], int] = {}
    for s in doc["sites"]:
        k = (s[kind]["blocks"], s[kind]["bytes"])
        if k[0]:
            out[k] = out.get(k, 0) + 1
    return out


def children_of(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    return kids


def test_the_hooks_unsent_records_are_the_table(empty_table: Path) -> None:
    """Preloaded with the fake device, a burst of commands stays in the
    thread's buffer: the registry gives every block, and the lost ones come
    out by size as the program made them; the output and status are a bare
    run's, and the copy is a zombie of the target's parent, not the target's."""
    bare = subprocess.run([str(BIN / "unreach")],
                          input=("\n".join(COMMANDS) + "\nquit\n").encode(),
                          capture_output=True, timeout=60, env=clean_env())
    t = Target([str(BIN / "unreach")], clean_env(LD_PRELOAD=str(FAKE), PMM_START="1",
                                                  PMM_QUIET="1"))
    t.send(COMMANDS)
    time.sleep(0.2)
    doc = scan_doc(t.p.pid, empty_table, "--age", "50")
    # requests (2 blocks each), list, cycles, cache (an entry and its strdup),
    # the table of slots and stdio's buffers: those not freed before the scan
    assert doc["table"]["pending_allocs"] == 20 + 20 + 6 + 200 + 1 + 2, doc["table"]
    assert by_size(doc, "definite") == {(10, 560): 1, (1, 16): 1, (3, 240): 1}, doc["sites"]
    assert by_size(doc, "indirect") == {(10, 1280): 1, (19, 304): 1, (3, 240): 1}, doc["sites"]
    assert doc["heap"]["allocator"] == "glibc" and doc["heap"]["cached_chunks"] > 0
    assert doc["heap"]["uncopied_bytes"] == 0  # the hook's wiped page is its own
    (req,) = [s for s in doc["sites"] if s["definite"]["bytes"] == 560]
    assert req["example"]["size"] == 56 and len(req["example"]["bytes"]) == 64
    # the copy was the target's parent's child (ours): the target has none,
    # and we have a zombie to reap, as init or a shell reaps it
    assert children_of(t.p.pid) == []
    (copy,) = [k for k in children_of(os.getpid()) if k != t.p.pid]
    assert Path(f"/proc/{copy}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert os.waitpid(copy, 0)[0] == copy
    assert t.finish() == (bare.returncode, bare.stdout, bare.stderr)


def test_stop_and_copy_leave_a_waiting_process_as_it_was(empty_table: Path) -> None:
    """A scan while the program sleeps in read(): it wakes for its input
    as if nothing happened, many times over."""
    t = Target([str(BIN / "unreach")], clean_env())
    t.send(["cache 50"])
    for _ in range(5):
        doc = scan_doc(t.p.pid, empty_table)
        assert doc["stop"]["threads"] == 1
        t.send(["list 3"])
    rc, out, err = t.finish()
    assert (rc, err) == (0, b"")
    assert out.decode().splitlines() == ["ok cache 50", *["ok list 3"] * 5, "bye"]


# -- refusals -----------------------------------------------------------------------


def unreach_waiting(*wrap: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """unreach waiting on its stdin, under wrap: a target with the blocks
    the tests scan for (conftest's sleeper is a plain sleep)."""
    p = subprocess.Popen([*wrap, str(BIN / "unreach")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env or clean_env())
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(b"cache 1\n")
    p.stdin.flush()
    assert p.stdout.readline() == b"ok cache 1\n"
    return p


@pytest.fixture
def target() -> Iterator[subprocess.Popen[bytes]]:
    p = unreach_waiting()
    yield p
    p.kill()
    p.wait()


def test_refuses_a_static_program(empty_table: Path) -> None:
    p = subprocess.Popen([str(BIN / "attachee-static"), "20", "wait", "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env())
    try:
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
        r = run_scan(p.pid, empty_table)
        assert r.returncode == 6 and "statically linked" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()


def test_refuses_a_traced_process(target: subprocess.Popen[bytes], empty_table: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("no strace")
    st = subprocess.Popen(["strace", "-o", "/dev/null", "-p", str(target.pid)],
                          stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if "TracerPid:\t0" not in Path(f"/proc/{target.pid}/status").read_text():
                break
            time.sleep(0.05)
        r = run_scan(target.pid, empty_table)
        assert r.returncode == 5 and "traced already" in r.stderr, r.stderr
    finally:
        st.terminate()
        st.wait()


SECCOMP_ALLOW_ALL = """
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
insn = struct.pack('HBBI', 0x06, 0, 0, 0x7fff0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
buf = ctypes.create_string_buffer(insn)
prog = struct.pack('HxxxxxxQ', 1, ctypes.addressof(buf))
pbuf = ctypes.create_string_buffer(prog)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.addressof(pbuf), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_refuses_a_seccomp_filter_unless_allowed(empty_table: Path) -> None:
    p = unreach_waiting("python3", "-c", SECCOMP_ALLOW_ALL)
    try:
        assert "Seccomp:\t2" in Path(f"/proc/{p.pid}/status").read_text()
        r = run_scan(p.pid, empty_table)
        assert r.returncode == 9 and "--allow-seccomp" in r.stderr, r.stderr
        r = run_scan(p.pid, empty_table, "--allow-seccomp")
        assert r.returncode == 0, r.stderr  # a filter that allows the clone
    finally:
        p.kill()
        p.wait()


def test_refuses_pid_1_of_a_namespace(empty_table: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"])
    try:
        kid = []
        for _ in range(100):
            kid = [k for k in children_of(p.pid)
                   if Path(f"/proc/{k}/comm").read_text().strip() == "sleep"]
            if kid:
                break
            time.sleep(0.05)
        assert kid, "no sleep"
        r = run_scan(kid[0], empty_table)
        assert r.returncode == 10 and "pid 1 of its pid namespace" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()


def test_refuses_sampled_mode_and_no_hook(empty_table: Path) -> None:
    p = unreach_waiting(env=clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_SAMPLE="4096",
                              PMM_QUIET="1"))
    try:
        r = run_scan(p.pid, empty_table)
        assert r.returncode == 8 and "sampled mode" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()
    p = unreach_waiting()
    try:
        with open("/dev/null", "rb") as dev:  # a device: the registry is asked for first
            r = subprocess.run([str(SCAN), "--device-fd", str(dev.fileno()), str(p.pid)],
                               capture_output=True, text=True, pass_fds=(dev.fileno(),))
        assert r.returncode == 8 and "no libpmmhook.so" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()


def test_refuses_without_permission(target: subprocess.Popen[bytes], empty_table: Path,
                                    tmp_path: Path) -> None:
    """nobody may not ptrace root's process: refused, exit 4."""
    empty_table.chmod(0o644)
    tmp_path.chmod(0o755)
    r = subprocess.run(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY),
                        "--clear-groups", str(SCAN), "--blocks", str(empty_table),
                        str(target.pid)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 4 and "refused" in r.stderr, r.stderr


def test_no_room_to_fork_is_refused_and_the_target_runs_on(empty_table: Path) -> None:
    """The target's user may run one process (RLIMIT_NPROC 1): the clone
    fails with EAGAIN, the scan says so, and the target is as it was."""
    p = unreach_waiting("setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
                "prlimit", "--nproc=1", "--")
    try:
        r = run_scan(p.pid, empty_table)
        assert r.returncode == 10 and "no room for another process" in r.stderr, r.stderr
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(b"list 2\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"ok list 2\n"
        out, err = p.communicate(b"quit\n", timeout=60)
        assert (p.returncode, out, err) == (0, b"bye\n", b"")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# -- hostile targets -------------------------------------------------------------------


def hostile(mode: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY),
                          "--clear-groups", str(BIN / "unreach_hostile"), mode],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env or clean_env())
    assert p.stdout is not None
    assert p.stdout.readline() == b"ready\n", p.stderr.read() if p.stderr else ""
    return p


def garbage_table(path: Path, n: int = 5000) -> None:
    """Blocks that lie: null, wrapping, huge, unmapped, overlapping, future."""
    import random

    rnd = random.Random(7)
    base = 0x555555554000
    recs = []
    for _ in range(n):
        ptr = rnd.choice([0, 2**64 - 16, rnd.randrange(2**64), base + rnd.randrange(1 << 30),
                          0x7FFC00000000 + rnd.randrange(1 << 20) * 16, 16, base, 2**63])
        size = rnd.choice([0, 2**64 - 1, rnd.randrange(2**64), rnd.randrange(1 << 20), 1 << 40])
        t = rnd.choice([0, 1, 2**64 - 1, rnd.randrange(2**64)])
        recs.append(struct.pack("QQQQIIHHHH", ptr, 0, size, t, rnd.randrange(2**32), 1,
                                rnd.randrange(16), 0, 0, 0))
    path.write_bytes(b"".join(recs))


@pytest.mark.parametrize("mode", ["heap", "tcache", "registry", "table"])
def test_hostile_targets_under_asan(mode: str, tmp_path: Path, empty_table: Path) -> None:
    """Chunk headers of garbage (the heap is then not walked), tcache lists
    that loop (not taken for free), a registry rewritten (ignored or
    refused), a table of lies: no sanitizer report, no hang."""
    table = empty_table
    if mode == "table":
        table = tmp_path / "garbage.blocks"
        garbage_table(table)
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_QUIET="1") \
        if mode == "registry" else None
    p = hostile("heap" if mode == "table" else mode, env)
    try:
        r = run_scan(p.pid, table, scanner=ASAN,
                     env={**clean_env(), "ASAN_OPTIONS": "detect_leaks=0"})
        assert r.returncode in (0, 8), r.stderr
        assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr
        if r.returncode == 0:
            doc = json.loads(r.stdout)
            assert doc["definite"]["blocks"] == 0 or mode == "table"
            if mode == "heap":
                assert doc["heap"]["unwalkable"] == 1 and doc["heap"]["walked"] == 0
            if mode == "tcache":
                assert doc["heap"]["cached_chunks"] == 0  # a list that loops is no list
    finally:
        p.kill()
        p.wait()


# -- pmm.unreachable's pure parts --------------------------------------------------------


def doc_of(sites: list[dict[str, Any]]) -> dict[str, Any]:
    c = {"blocks": 0, "bytes": 0}
    return {"version": 1, "pid": 42, "snapshot_ns": 10**10, "age_ns": 10**9,
            "stop": {"threads": 2, "longest_us": 800, "all_stopped_us": 300, "clone_us": 500},
            "scan": {"us": 12000, "roots_bytes": 1, "objects_bytes": 2, "read_bytes": 3},
            "table": {"blocks": 100, "bytes": 4096}, "heap": {"allocator": "glibc"},
            "reachable": c, "via_unknown": c, "young": {"blocks": 3, "bytes": 30},
            "held_by_young": c, "definite": {"blocks": 2, "bytes": 112},
            "indirect": {"blocks": 2, "bytes": 256}, "unknown": {"blocks": 1, "bytes": 640},
            "sites": sites}


SITE = {"site": 7, "definite": {"blocks": 2, "bytes": 112},
        "indirect": {"blocks": 2, "bytes": 256},
        "example": {"ptr": 0x5555deadbee0, "size": 56, "time_ns": 7 * 10**9, "definite": True,
                    "bytes": "72657175657374203120626f6479000000"}}


def test_parse_refuses_what_is_not_pmm_scan_output() -> None:
    for text in ("", "not json", "[]", '{"version": 2, "sites": []}', '{"version": 1}'):
        with pytest.raises(un.ScanError):
            un.parse(text)
    assert un.parse(json.dumps(doc_of([])))["pid"] == 42


def test_refusals_become_typed_errors() -> None:
    from pmctl.exitcodes import exit_code_for
    from pmm.errors import NoSuchPid, NotMonitored, PermissionDenied

    assert isinstance(un.scan_error(3, "x"), NoSuchPid)
    assert isinstance(un.scan_error(4, "x"), PermissionDenied)
    assert isinstance(un.scan_error(7, "x"), NotMonitored)
    codes = {rc: exit_code_for(un.scan_error(rc, "m")) for rc in (5, 6, 8, 9, 10, 11, 13, 1, 99)}
    assert codes == {5: 30, 6: 31, 8: 32, 9: 33, 10: 34, 11: 35, 13: 36, 1: 1, 99: 1}


def test_sites_are_described_and_rendered() -> None:
    from pmm.kernel.model import Site
    from pmm.symbolize import Frame

    frames = {7: [Frame(0, "/lib/libc.so.6", 0x9a1c0, func="malloc"),
                  Frame(0, "/srv/bin/server", 0x1234, func="handle_request",
                        file="/src/server.c", line=57)]}
    sites = un.lost_sites(doc_of([SITE]), frames, {7: Site(site=7, flags=0, frames=(1, 2))},
                          9 * 10**9)
    (s,) = sites
    assert (s["func"], s["file"], s["line"], s["source"]) == \
        ("handle_request", "/src/server.c", 57, "debuginfo")
    assert s["example"]["text"] == "request 1 body..."
    assert s["example"]["hex"].startswith("72 65 71") and s["example"]["age_s"] == 2.0
    r = un.UnreachableReport(pid=42, comm="server", scan=doc_of([SITE]), sites=sites)
    d = r.to_dict(depth=1)
    assert d["totals"]["definite"] == {"blocks": 2, "bytes": 112}
    assert len(d["sites"][0]["frames"]) == 1 and d["stop"]["longest_us"] == 800
    text = un.render(r)
    assert "pid 42 (server): 2 blocks (112 B) definitely lost, 2 blocks (256 B) indirectly" \
        in text
    assert re.search(r"112 B\s+2\s+256 B\s+2\s+handle_request\(\) server.c:57", text), text
    assert "|request 1 body...|" in text and "3 blocks (30 B) younger than 1s" in text


def test_pprof_has_the_lost_sample_types(tmp_path: Path) -> None:
    from pmm.pprof import LOST_DEFAULT_SAMPLE_TYPE, LOST_SAMPLE_TYPES, profile_pb2, write_profile

    r = un.UnreachableReport(pid=42, comm="server", scan=doc_of([SITE]),
                             sites=un.lost_sites(doc_of([SITE]), {}, {}, 0))
    out = tmp_path / "lost.pb.gz"
    write_profile(out, un.pprof_samples(r), period=1, time_ns=1,
                  sample_types=LOST_SAMPLE_TYPES, default_sample_type=LOST_DEFAULT_SAMPLE_TYPE)
    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress(out.read_bytes()))
    names = [prof.string_table[t.type] for t in prof.sample_type]
    assert names == ["lost_objects", "lost_space", "indirect_objects", "indirect_space"]
    assert prof.string_table[prof.default_sample_type] == "lost_space"
    assert [list(s.value) for s in prof.sample] == [[2, 112, 2, 256]]


def test_age_below_the_stamps_skew_is_a_usage_error() -> None:
    from typer.testing import CliRunner

    from pmctl import cli

    r = CliRunner().invoke(cli.app, ["unreachable", "1", "--age", "10ms"])
    assert r.exit_code == 2 and "too young" in r.output




def test_a_process_whose_main_thread_left(empty_table: Path) -> None:
    """The main thread called pthread_exit and is a zombie while another
    thread serves: the process is scanned, its live thread stopped alone."""
    t = Target([str(BIN / "unreach")], clean_env(LD_PRELOAD=str(FAKE), PMM_START="1",
                                                  PMM_QUIET="1", UNREACH_THREAD="1"))
    t.send(["req 4"])
    time.sleep(0.2)
    assert Path(f"/proc/{t.p.pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    doc = scan_doc(t.p.pid, empty_table, "--age", "50")
    assert doc["stop"]["threads"] == 1
    assert by_size(doc, "definite") == {(4, 224): 1}, doc["sites"]
    assert t.finish()[0] == 0
