"""`pmctl attach` against the real module (in the VM): real programs doing
real work, attached mid-run, finish with a bare run's output and status;
a leak that starts after the attach is ranked first by `pmctl leaks`, exact
and sampled, with libc's allocator and with jemalloc; attach and stop again
and again on an 8-thread program, each window's accounting exact."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers import FULL, PROGS, TOP, pmctl, pmctl_json

from pmm.kernel.device import Device

LIB = PROGS / "libattachee.so"








def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PMM_") and k != "LD_PRELOAD"}


def run_bare(argv: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=stdin, capture_output=True, env=clean_env(),
                          timeout=600)


def attach_mid_run(argv: list[str], part1: bytes, part2: bytes,
                   *opts: str) -> tuple[int, subprocess.CompletedProcess[bytes]]:
    """argv fed part1, attached while it waits for more, then fed part2."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=clean_env())
    assert p.stdin is not None
    p.stdin.write(part1)
    p.stdin.flush()
    time.sleep(1)
    r = pmctl("attach", str(p.pid), *opts)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"attached to pid {p.pid} ")
    out, err = p.communicate(part2, timeout=600)
    return p.pid, subprocess.CompletedProcess(argv, p.returncode, out, err)


def same_as_bare(argv: list[str], part1: bytes, part2: bytes, *opts: str) -> int:
    want = run_bare(argv, part1 + part2)
    pid, got = attach_mid_run(argv, part1, part2, *opts)
    assert (got.returncode, got.stdout, got.stderr) == \
        (want.returncode, want.stdout, want.stderr)
    return pid


def records_of(pid: int) -> int:
    (p,) = [p for p in pmctl_json("status")["pids"] if p["pid"] == pid]
    return int(p["records"])


PY = ("import sys, json\n"
      "acc = {}\n"
      "for line in sys.stdin:\n"
      "    k, n = line.split()\n"
      "    d = {str(i): [i] * (i % 7) for i in range(int(n))}\n"
      "    acc[k] = len(json.dumps(d))\n"
      "print(sum(acc.values()), len(acc))\n")


def lines(a: int, b: int) -> bytes:
    return "".join(f"k{i} {200 + i % 50}\n" for i in range(a, b)).encode()


@pytest.mark.parametrize("mode", ["exact", "sampled"])
def test_attach_python3(pmm: None, cache: Path, mode: str) -> None:
    opts = ["--sample", "65536"] if mode == "sampled" else []
    pid = same_as_bare(["python3", "-c", PY], lines(0, 100), lines(100, 400), *opts)
    assert records_of(pid) > 0


def test_attach_sqlite3(pmm: None, cache: Path) -> None:
    part1 = b"create table t(a integer, b text);\n" + b"".join(
        f"insert into t values({i}, 'row-{i}');\n".encode() for i in range(300))
    part2 = (b"with recursive c(x) as (select 1 union all select x + 1 from c where x < 5000)"
             b" insert into t select x, printf('name-%d', x % 997) from c;\n"
             b"select count(*), sum(a), max(b) from t;\n"
             b"create index i on t(b);\n"
             b"select b, count(*) from t group by b order by 2 desc, 1 limit 3;\n")
    pid = same_as_bare(["sqlite3", ":memory:"], part1, part2)
    assert records_of(pid) > 0


def test_attach_perl(pmm: None, cache: Path) -> None:
    script = ('my %h; while (<STDIN>) { my ($k, $n) = split; '
              'my @a = map { "x" x ($_ % 40) } 1..$n; $h{$k} = join(",", @a); } '
              'my $t = 0; $t += length($h{$_}) for keys %h; print "$t\\n";')
    pid = same_as_bare(["perl", "-e", script], lines(0, 100), lines(100, 300))
    assert records_of(pid) > 0


def ready(p: subprocess.Popen[bytes]) -> None:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith(b"ready "), line


def test_attach_cxx_threads(pmm: None, cache: Path) -> None:
    """4 std::threads with new/delete and containers, 30 rounds."""
    argv = [str(PROGS / "cxx_threads"), "30"]
    want = run_bare(argv)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, env=clean_env())
    ready(p)
    r = pmctl("attach", str(p.pid))
    assert r.exit_code == 0, r.stderr
    out, err = p.communicate(timeout=600)
    assert (p.returncode, out, err) == \
        (want.returncode, want.stdout.split(b"\n", 1)[1], want.stderr)
    assert records_of(p.pid) > 0


def attachee(*args: str, exe: str = "attachee") -> subprocess.Popen[bytes]:
    assert (PROGS / exe).exists(), f"{exe} is not built (libjemalloc2: `make setup`)"
    p = subprocess.Popen([str(PROGS / exe), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=clean_env())
    ready(p)
    return p


def go_on(p: subprocess.Popen[bytes]) -> None:
    """Lets an attachee waiting at its round (wait AT) go on."""
    assert p.stdin is not None
    p.stdin.write(b"go\n")
    p.stdin.flush()


def finish(p: subprocess.Popen[bytes]) -> bytes:
    out, err = p.communicate(timeout=600)
    assert (p.returncode, err) == (0, b""), out + err
    assert b"short_sleeps 0" in out
    return out


def test_attach_follows_dlopen(pmm: None, cache: Path) -> None:
    """attachee_alloc in a library loaded after the attach: its blocks are
    recorded (100 a round from round 10, all freed: the stats count them)."""
    p = attachee("30", "dlopen", str(LIB), "10", "wait", "10")
    assert pmctl("attach", str(p.pid)).exit_code == 0
    go_on(p)
    finish(p)
    st = pmctl_json("stats", str(p.pid))
    big = [b for b in st["buckets"] if b["max_size"] is None or b["max_size"] >= 70001]
    assert sum(b["malloc"] for b in big) >= 100 * 20


@pytest.mark.parametrize("exe,mode", [("attachee", "exact"), ("attachee", "sampled"),
                                      ("attachee-jemalloc", "exact")])
def test_attach_leak_after_attach_ranked_first(pmm: None, cache: Path, exe: str,
                                               mode: str) -> None:
    """The program starts leaking 4000 bytes a round at leaking_site after the
    attach (round 10 of 40): `pmctl leaks` names that site first, with every
    leaked block in exact mode. Just after the attach it frees 1500 of 3000
    blocks allocated before it and grows the rest by realloc: in exact mode
    each is counted as a free of an older block, not as an unmatched free
    (a few may, where an allocation since shares the hook's bucket of its
    address and the free is sent the ordinary way)."""
    opts = ["--sample", "4096"] if mode == "sampled" else []
    p = attachee("40", "leak", "10", "wait", "10", "threads", "2", "older", "3000", exe=exe)
    r = pmctl("attach", str(p.pid), *opts)
    assert r.exit_code == 0, r.stderr
    go_on(p)
    finish(p)
    lk = pmctl_json("leaks", str(p.pid))
    top = lk["sites"][0]
    assert (top["func"], os.path.basename(top["file"] or "")) == \
        ("leaking_site", "attachee.c"), lk["sites"][:3]
    (info,) = [q for q in pmctl_json("status")["pids"] if q["pid"] == p.pid]
    if mode == "exact":
        assert (top["blocks"], top["bytes"]) == (30, 30 * 4000)
        assert info["older_frees"] >= 3000 + 1, info
        # the ordinary way: older blocks whose hashed bucket an allocation of
        # the two other threads set before this one freed them; a few per
        # thousand, more when this thread runs late (29 seen on a loaded host)
        assert info["unmatched_frees"] + info["pending_frees"] <= 60, info
    else:
        assert top["bytes"] > 30 * 4000 // 2


# A user's script: programs started in the background, each attached DELAY
# seconds later by its pid from $!, all at once.
ATTACH_SCRIPT = r"""
out=$1; shift
for d in "$@"; do
    (
        "$PROG" 600 2 > "$out/prog.$d" 2>&1 &
        p=$!
        sleep "$d"
        pmctl attach "$p" > "$out/attach.$d" 2>&1
        echo "$? $p" > "$out/rc.$d"
    ) &
done
wait
"""


def test_attach_from_a_shell_script_at_any_delay(pmm: None, cache: Path,
                                                 tmp_path: Path) -> None:
    """`prog & p=$!; sleep D; pmctl attach $p` for D from 0 to 5 s, the way a
    script does it, four at once (a leaker with two churning threads, built
    -O1 -g): every attach works, and `pmctl leaks` names the leaking line of
    each."""
    Path("/proc/pmm/cfg").write_text("INTERVAL 100\n")
    delays = ["0", "1", "2.5", "5"]
    env = {**clean_env(), "PROG": str(PROGS / "leak_loop"),
           "PATH": f"{TOP / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    subprocess.run(["sh", "-c", ATTACH_SCRIPT, "sh", str(tmp_path), *delays], env=env,
                   timeout=600, check=True)
    pids: list[int] = []
    try:
        for d in delays:
            rc, pid_text = (tmp_path / f"rc.{d}").read_text().split()
            pids.append(int(pid_text))
            said = (tmp_path / f"attach.{d}").read_text()
            assert rc == "0", f"delay {d}: {said}"
            assert said == f"attached to pid {pid_text} (leak_loop): exact\n", said
            assert (tmp_path / f"prog.{d}").read_text().startswith(f"pid {pid_text}\n")
        time.sleep(2)  # leaks since the last attach
        for pid in pids:
            top = pmctl_json("leaks", str(pid))["sites"][0]
            assert (top["func"], os.path.basename(top["file"] or "")) == \
                ("leak_request", "leak_loop.c"), top
            assert top["blocks"] >= 10, top
    finally:
        for pid in pids:
            os.kill(pid, 9)


def window_cmd(p: subprocess.Popen[bytes], cmd: str) -> str:
    """Sends an attachee in windows mode a command; its one-line answer."""
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(cmd.encode() + b"\n")
    p.stdin.flush()
    return p.stdout.readline().decode()


def test_attach_stop_attach_cycles(pmm: None, cache: Path) -> None:
    """8 threads hammering malloc/free, each keeping its last 16 blocks,
    in windows attached and stopped again and again (exact and sampled in
    turn): no crash, no hang, and each window's accounting exact. In an
    exact window, when the threads end (their exit sends their records),
    the module's live blocks at their site are exactly the 128 blocks they
    hold, address and size, and none once another thread frees them; no
    record dropped, no free unmatched or pending. A sampled window's blocks
    are among them, and gone as well once freed."""
    cycles = 100 if FULL else 8
    p = subprocess.Popen([str(PROGS / "attachee"), "windows", "8"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=clean_env())
    ready(p)
    try:
        for i in range(cycles):
            sampled = i % 2 == 1
            r = pmctl("attach", str(p.pid), *(["--sample", "8192"] if sampled else []))
            assert r.exit_code == 0, (i, r.stderr)
            assert window_cmd(p, "run") == "running\n"
            n, deadline = 0, time.monotonic() + 10
            while n == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
                n = records_of(p.pid)
            assert n > 0, i
            time.sleep(0.2)
            words = window_cmd(p, "hold").split()
            assert words[0] == "held" and len(words) == 1 + 8 * 16, (i, words[:3])
            held = {int(a, 16): int(sz) for a, sz in (w.split(":") for w in words[1:])}
            assert len(held) == 8 * 16 and 0 not in held, i
            with Device.open() as dev:
                blocks = dev.blocks(p.pid)
                info = dev.pid_info(p.pid)
            assert info is not None
            sites = {b.site for b in blocks if b.ptr in held}
            live = {b.ptr: b.size for b in blocks if b.site in sites}
            if sampled:
                assert len(sites) <= 1 and live.items() <= held.items(), i
            else:
                assert len(sites) == 1 and live == held, i
            assert (info.dropped_records, info.unmatched_frees) == (0, 0), (i, info)
            assert window_cmd(p, "free") == "freed\n"
            with Device.open() as dev:
                left = [b for b in dev.blocks(p.pid) if b.site in sites]
                info = dev.pid_info(p.pid)
            assert info is not None
            assert left == [] and (info.pending_frees, info.unmatched_frees) == (0, 0), i
            assert pmctl("stop", str(p.pid)).exit_code == 0
        assert window_cmd(p, "end") == ""
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def in_mount_namespace(shell: str) -> subprocess.Popen[bytes]:
    """shell run in a mount namespace of its own, its attachee ready."""
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.PIPE, env=clean_env())
    ready(p)
    return p


def test_attach_in_another_mount_namespace(pmm: None, cache: Path) -> None:
    """A program in a mount namespace of its own where the hook's directory
    is an empty tmpfs (a container without the hook): a copy of the hook is
    loaded from a memfd, and its leak after the attach is ranked first.
    Where /dev/pmm is hidden too, the attach is refused (26) saying so, and
    the program runs on as bare."""
    hooklib = TOP / "hooklib"
    exe = PROGS / "attachee"
    args = "40 leak 10 wait 10 threads 2"
    p = in_mount_namespace(f"mount -t tmpfs none {hooklib} && exec {exe} {args}")
    r = pmctl("attach", str(p.pid))
    assert r.exit_code == 0, r.stderr
    assert "loaded from a memfd" in r.stdout
    go_on(p)
    finish(p)
    top = pmctl_json("leaks", str(p.pid))["sites"][0]
    assert (top["func"], os.path.basename(top["file"] or "")) == \
        ("leaking_site", "attachee.c"), top
    assert (top["blocks"], top["bytes"]) == (30, 30 * 4000)

    p = in_mount_namespace(f"mount -t tmpfs none {hooklib} && mount -t tmpfs none /dev && "
                           f"exec {exe} 20 wait 0")
    r = pmctl("attach", str(p.pid))
    assert r.exit_code == 26 and "no /dev/pmm in its mount namespace" in r.stderr, r.stderr
    go_on(p)
    finish(p)


def test_attach_refusals(pmm: None, cache: Path) -> None:
    """Refused with pmctl's attach exit codes; the program runs on as bare."""
    hook = TOP / "hooklib" / "libpmmhook.so"
    env = dict(clean_env(), LD_PRELOAD=str(hook), PMM_QUIET="1")
    p = subprocess.Popen([str(PROGS / "attachee"), "20", "wait", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=env)
    ready(p)
    r = pmctl("attach", str(p.pid))
    if r.exit_code != 26:
        p.kill()
        raise AssertionError((r.stderr, open(f"/proc/{p.pid}/status").read()
                              if os.path.exists(f"/proc/{p.pid}") else None, p.communicate()))
    assert "preloaded already" in r.stderr
    go_on(p)
    finish(p)
    s = attachee("20", "wait", "0", exe="attachee-static")
    r = pmctl("attach", str(s.pid))
    assert r.exit_code == 21 and "statically linked" in r.stderr
    go_on(s)
    finish(s)
    r = pmctl("attach", str(2**22 + 7))
    assert r.exit_code == 5


def test_attach_refused_by_yama(pmm: None) -> None:
    """kernel.yama.ptrace_scope 1: a user's own process that is not its
    child may not be attached to; pmm-inject says why (exit 4, pmctl's
    permission code), and the program runs on as bare."""
    yama = Path("/proc/sys/kernel/yama/ptrace_scope")
    if not yama.exists():
        pytest.skip("no Yama in this kernel")
    old = yama.read_text()
    p = subprocess.Popen([str(PROGS / "attachee"), "20", "wait", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.PIPE, env=clean_env(),
                         user=65534, group=65534, extra_groups=[])
    try:
        ready(p)
        yama.write_text("1")
        r = subprocess.run([str(TOP / "hooklib" / "pmm-inject"), str(p.pid), "PMM_START=1"],
                           capture_output=True, text=True, timeout=60, user=65534,
                           group=65534, extra_groups=[])
    finally:
        yama.write_text(old)
    assert r.returncode == 4, r.stderr
    assert "kernel.yama.ptrace_scope is 1: only a parent or CAP_SYS_PTRACE may attach" \
        in r.stderr
    go_on(p)
    finish(p)


def test_startup_no_preload_leak_ranked_first_child_not_monitored(pmm: None,
                                                                   cache: Path) -> None:
    """`pmctl run --no-preload`: the hook attached at the entry point, no
    LD_PRELOAD. attachee leaks 4000 bytes a round from round 2 of 12: every
    block is counted at leaking_site, ranked first, and no allocation of its
    is an unmatched free. startup's child (fork and exec) is not monitored:
    only its parent is, and it ends with its own status."""
    r = pmctl("run", "--no-preload", "--", str(PROGS / "attachee"), "12", "leak", "2")
    assert r.exit_code == 0, r.stderr
    pid = int(r.stderr.split("pmctl: pid ")[1].split()[0])
    lk = pmctl_json("leaks", str(pid))
    top = lk["sites"][0]
    assert (top["func"], os.path.basename(top["file"] or "")) == \
        ("leaking_site", "attachee.c"), lk["sites"][:3]
    assert (top["blocks"], top["bytes"]) == (10, 10 * 4000)
    (info,) = [q for q in pmctl_json("status")["pids"] if q["pid"] == pid]
    assert info["unmatched_frees"] + info["pending_frees"] == 0, info
    r = pmctl("run", "--no-preload", "--", str(PROGS / "startup"), "3")
    assert r.exit_code == 3, r.stderr
    pid2 = int(r.stderr.split("pmctl: pid ")[1].split()[0])
    assert sorted(q["pid"] for q in pmctl_json("status")["pids"]) == sorted([pid, pid2])
