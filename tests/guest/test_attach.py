"""`pmctl attach` against the real module (in the VM): real programs doing
real work, attached mid-run, finish with a bare run's output and status;
a leak that starts after the attach is ranked first by `pmctl leaks`, exact
and sampled, with libc's allocator and with jemalloc; attach and stop again
and again on an 8-thread program."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers import FULL, PROGS, TOP, pmctl, pmctl_json

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
    leaked block in exact mode."""
    opts = ["--sample", "4096"] if mode == "sampled" else []
    p = attachee("40", "leak", "10", "wait", "10", "threads", "2", exe=exe)
    r = pmctl("attach", str(p.pid), *opts)
    assert r.exit_code == 0, r.stderr
    go_on(p)
    finish(p)
    lk = pmctl_json("leaks", str(p.pid))
    top = lk["sites"][0]
    assert (top["func"], os.path.basename(top["file"] or "")) == \
        ("leaking_site", "attachee.c"), lk["sites"][:3]
    if mode == "exact":
        assert (top["blocks"], top["bytes"]) == (30, 30 * 4000)
    else:
        assert top["bytes"] > 30 * 4000 // 2


def test_attach_stop_attach_cycles(pmm: None, cache: Path) -> None:
    """8 threads hammering malloc/free; attached and stopped again and again:
    no crash, no hang, records in every window, the program's output bare."""
    cycles = 100 if FULL else 8
    p = attachee("1000000", "threads", "8", "until-stdin", "wait", "0")
    seen = 0
    for i in range(cycles):
        r = pmctl("attach", str(p.pid), *(["--sample", "8192"] if i % 2 else []))
        if r.exit_code != 0:
            p.kill()
            raise AssertionError((i, r.stderr, p.communicate()))
        n, deadline = 0, time.monotonic() + 10
        while n == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
            n = records_of(p.pid)
        assert n > 0, i
        seen += n
        assert pmctl("stop", str(p.pid)).exit_code == 0
        if i == 0:
            go_on(p)  # it waited at round 0 for the first attach
    finish(p)
    assert seen > 0


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
