"""`pmctl unreachable` against the real module (in the VM): programs that
leak by dropping their last pointer have every leaked block reported lost at
the line marked LOST in their source, with exact counts, while they run,
preloaded and after an attach; programs that do not leak have nothing lost;
a scan changes neither a program's output nor its exit status. The host's
tests/host/test_unreachable.py checks that valgrind's leak check, at exit,
calls exactly the same lines definitely and indirectly lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PROGS, TOP, pmctl, pmctl_json

HOOK = TOP / "hooklib" / "libpmmhook.so"
SRC = TOP / "tests" / "progs" / "hook"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PMM_") and k != "LD_PRELOAD"}


def marked(source: Path, kind: str) -> set[str]:
    """The source's lines marked LOST: KIND, as 'file:line'."""
    out = set()
    for i, line in enumerate(source.read_text().splitlines(), 1):
        m = re.search(r"LOST: ([a-z, ]+)", line)
        if m and kind in m.group(1):
            out.add(f"{source.name}:{i}")
    return out


class Server:
    """A program reading commands on stdin and answering 'ok CMD N'."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env)
        self.out: list[bytes] = []

    @property
    def pid(self) -> int:
        return self.p.pid

    def do(self, line: str) -> None:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        got = self.p.stdout.readline()
        self.out.append(got)
        assert got == f"ok {line}\n".encode(), got

    def finish(self) -> subprocess.CompletedProcess[bytes]:
        out, err = self.p.communicate(b"quit\n", timeout=600)
        return subprocess.CompletedProcess(self.p.args, self.p.returncode,
                                           b"".join(self.out) + out, err)


def preloaded(argv: list[str], **settings: str) -> Server:
    return Server(argv, {**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                         "PMM_QUIET": "1", **settings})


def scan(pid: int, *opts: str) -> dict[str, Any]:
    doc: dict[str, Any] = pmctl_json("unreachable", str(pid), "--depth", "32", *opts)
    return doc


def where(site: dict[str, Any], source: str) -> str:
    """The site's first frame in the program's own source, as 'file:line'."""
    for f in site["frames"]:
        if f.get("file") and os.path.basename(f["file"]) == source:
            return f"{source}:{f['line']}"
    return f"? {site['where']}"


def lost_lines(doc: dict[str, Any], source: str, kind: str) -> dict[str, int]:
    """Blocks lost (definite or indirect) per line of source."""
    out: dict[str, int] = {}
    for s in doc["sites"]:
        if s[kind]["blocks"]:
            w = where(s, source)
            out[w] = out.get(w, 0) + s[kind]["blocks"]
    return out


def settle() -> None:
    """Past the age gate (1 s) of the blocks just made."""
    time.sleep(1.5)


COMMANDS = ["req 10", "list 20", "cycle 3", "cache 100", "saw 1000", "churn 10"]


def check_unreach(doc: dict[str, Any]) -> None:
    src = SRC / "unreach.c"
    lines = {int(w.split(":")[1]): w for w in marked(src, "definite") | marked(src, "indirect")}
    text = src.read_text().splitlines()

    def at(pattern: str) -> str:
        (n,) = [n for n in lines if pattern in text[n - 1]]
        return lines[n]

    req, body = at("struct request *r"), at("r->body = malloc")
    node, pair_a, pair_b = at("struct node *x"), at("struct pair *a"), at("struct pair *b")
    assert lost_lines(doc, "unreach.c", "definite") == {req: 10, node: 1, pair_a: 3}, doc
    assert lost_lines(doc, "unreach.c", "indirect") == {body: 10, node: 19, pair_b: 3}, doc
    assert set(lost_lines(doc, "unreach.c", "definite")) == marked(src, "definite")
    assert set(lost_lines(doc, "unreach.c", "indirect")) == marked(src, "indirect")
    t = doc["totals"]
    assert (t["definite"]["blocks"], t["indirect"]["blocks"]) == (14, 32), t
    assert t["definite"]["bytes"] == 10 * 56 + 16 + 3 * 80
    assert t["indirect"]["bytes"] == 10 * 128 + 19 * 16 + 3 * 80
    (req_site,) = [s for s in doc["sites"] if where(s, "unreach.c") == req]
    ex = req_site["example"]
    assert ex["size"] == 56 and ex["definite"] is True
    assert doc["heap"]["allocator"] == "glibc" and doc["heap"]["walked"] >= 1, doc["heap"]
    assert doc["stop"]["threads"] == 1 and 0 < doc["stop"]["longest_us"] < 5_000_000


def test_request_loop_preloaded(pmm: None, cache: Path) -> None:
    """Monitored from its start: every command's blocks judged right, the
    example of a request struct its first bytes; the output and status as
    a bare run's."""
    bare = subprocess.run([str(PROGS / "unreach")], input="\n".join(COMMANDS) + "\nquit\n",
                          capture_output=True, text=True, env=clean_env(), timeout=600)
    srv = preloaded([str(PROGS / "unreach")])
    for c in COMMANDS:
        srv.do(c)
    settle()
    doc = scan(srv.pid)
    check_unreach(doc)
    done = srv.finish()
    assert (done.returncode, done.stdout.decode(), done.stderr.decode()) == \
        (bare.returncode, bare.stdout, bare.stderr)


def test_request_loop_after_an_attach(pmm: None, cache: Path) -> None:
    """Started without the hook, its first leaks and its table of slots made
    before the attach: after `pmctl attach` the same commands give the same
    lost blocks at the same lines, the older leaks are never counted (unknown
    to the table), and blocks kept only in the older table of slots are
    reachable through it, never lost. Output and status as a bare run's."""
    cmds = ["req 5", "list 7", "cache 20"]
    bare = subprocess.run([str(PROGS / "unreach")],
                          input="\n".join(cmds + COMMANDS + ["slot 30"]) + "\nquit\n",
                          capture_output=True, text=True, env=clean_env(), timeout=600)
    srv = Server([str(PROGS / "unreach")], clean_env())
    for c in cmds:
        srv.do(c)
    r = pmctl("attach", str(srv.pid))
    assert r.exit_code == 0, r.stderr
    for c in COMMANDS + ["slot 30"]:
        srv.do(c)
    settle()
    doc = scan(srv.pid)
    check_unreach(doc)
    # one may be reached directly, by a stale copy of its address in a register
    assert doc["totals"]["via_unknown"]["blocks"] >= 25, doc["totals"]
    assert doc["totals"]["unknown"]["blocks"] > 0
    done = srv.finish()
    assert (done.returncode, done.stdout.decode(), done.stderr.decode()) == \
        (bare.returncode, bare.stdout, bare.stderr)


def test_cxx_object_forgotten_by_its_owner(pmm: None, cache: Path) -> None:
    """new Session replaced without delete: 4 of 5 lost at the new-expression's
    line (PMM_DEPTH=4, past operator new), their string and vector buffers
    indirectly."""
    src = SRC / "unreach_owner.cc"
    srv = preloaded([str(PROGS / "unreach_owner")], PMM_DEPTH="4")
    srv.do("open 5")
    settle()
    doc = scan(srv.pid)
    (line,) = marked(src, "definite")
    assert lost_lines(doc, src.name, "definite") == {line: 4}, doc["sites"]
    assert doc["totals"]["definite"]["blocks"] == 4
    assert doc["totals"]["indirect"]["blocks"] == 8  # a name and a vector each
    assert srv.finish().returncode == 0


def test_threads_churning_while_it_leaks(pmm: None, cache: Path) -> None:
    """leak_loop: one thread drops a 100-byte block every 10 ms at
    leak_request, four others free(malloc(48)) all the time, across the
    scans: lost only at leak_request, more at the second scan, and the
    stop's threads are all of them."""
    p = subprocess.Popen([str(PROGS / "leak_loop"), "600", "4"], stdout=subprocess.PIPE,
                         env={**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                              "PMM_QUIET": "1"})
    try:
        assert p.stdout is not None and p.stdout.readline().startswith(b"pid ")
        time.sleep(3)
        first = scan(p.pid)
        time.sleep(2)
        second = scan(p.pid)
        for doc in (first, second):
            assert {s["func"] for s in doc["sites"]} == {"leak_request"}, doc["sites"]
            assert doc["totals"]["indirect"]["blocks"] == 0
            assert doc["stop"]["threads"] == 5
            (s,) = doc["sites"]
            assert s["definite"]["bytes"] == 100 * s["definite"]["blocks"] > 0
        assert second["totals"]["definite"]["blocks"] > first["totals"]["definite"]["blocks"]
    finally:
        p.kill()
        p.wait()


PY_WORK = """
import json, re, sys, time, collections
end = time.time() + float(sys.argv[1])
print("ready", flush=True)
cache = {}
n = 0
while time.time() < end:
    d = {str(i): [i] * (i % 7) for i in range(300)}
    s = json.dumps(d)
    cache[n % 500] = json.loads(s)
    c = collections.Counter(re.findall(r"[0-9]+", s))
    n += 1
print(n, len(cache), len(c))
"""

PERL_WORK = ('my %h; my $n = 0; my $end = time + $ARGV[0]; $| = 1; print "ready\\n"; '
             'while (time < $end) { my @a = map { "x" x ($_ % 40) } 1..300; '
             '$h{$n % 500} = join(",", @a); $n++ } print "$n\\n";')


def busy(argv: list[str], seconds: int = 600) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([*argv, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                              "PMM_QUIET": "1"})
    assert p.stdout is not None
    assert p.stdout.readline() == b"ready\n"
    return p


def nothing_lost(doc: dict[str, Any]) -> None:
    t = doc["totals"]
    results = os.environ.get("PMM_RESULTS")
    if results:  # what a scan of a program that does not leak finds, for the record
        with open(Path(results) / "unreachable-figures.txt", "a") as f:
            f.write(json.dumps({"pid": doc["pid"], "comm": doc["comm"], "totals": t,
                                "heap": doc["heap"], "table": doc["table"],
                                "stop": doc["stop"], "scan": doc["scan"]}) + "\n")
    assert (t["definite"]["blocks"], t["indirect"]["blocks"]) == (0, 0), doc["sites"][:5]
    assert t["reachable"]["blocks"] > 100, t


@pytest.mark.parametrize("lang", ["python3", "perl"])
def test_interpreters_lose_nothing(pmm: None, cache: Path, lang: str) -> None:
    """python3 and perl building and dropping structures all the time, scanned
    twice mid-run: nothing lost beyond the age gate."""
    argv = ["python3", "-c", PY_WORK] if lang == "python3" else ["perl", "-e", PERL_WORK]
    p = busy(argv)
    try:
        time.sleep(2)
        nothing_lost(scan(p.pid))
        time.sleep(1)
        doc = scan(p.pid)
        nothing_lost(doc)
        assert doc["heap"]["allocator"] == "glibc"
    finally:
        p.kill()
        p.wait()


def test_sqlite3_loses_nothing(pmm: None, cache: Path) -> None:
    """sqlite3 in the middle of a long statement (an index over 200,000 rows)."""
    p = subprocess.Popen(["sqlite3", ":memory:"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         env={**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                              "PMM_QUIET": "1"})
    assert p.stdin is not None
    p.stdin.write(b"create table t(a integer, b text);\n"
                  b"with recursive c(x) as (select 1 union all select x + 1 from c "
                  b"where x < 200000) insert into t select x, printf('name-%d', x % 997) "
                  b"from c;\nselect 'loaded';\n")
    p.stdin.flush()
    assert p.stdout is not None and p.stdout.readline() == b"loaded\n"
    p.stdin.write(b"create index i on t(b, a);\nselect count(*) from t t1, t t2 "
                  b"where t1.a < 2000 and t2.b = t1.b;\n")
    p.stdin.flush()
    try:
        time.sleep(1.5)
        nothing_lost(scan(p.pid))
    finally:
        out, _ = p.communicate(b".quit\n", timeout=900)
    assert p.returncode == 0 and out.strip().isdigit(), out


def test_redis_under_benchmark_loses_nothing(pmm: None, cache: Path, tmp_path: Path) -> None:
    """Debian's redis-server (jemalloc: no heap walk, the memory between
    blocks counts as roots) under redis-benchmark, scanned twice: nothing
    lost, and redis answers as before."""
    import shutil

    if not shutil.which("redis-server") or not shutil.which("redis-benchmark"):
        pytest.skip("no redis-server/redis-benchmark (make setup installs them)")
    port = "6391"
    srv = subprocess.Popen(["redis-server", "--port", port, "--save", "", "--appendonly", "no",
                            "--dir", str(tmp_path)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           env={**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                                "PMM_QUIET": "1"})
    try:
        for _ in range(600):
            if subprocess.run(["redis-cli", "-p", port, "ping"], capture_output=True,
                              text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.1)
        bench = subprocess.Popen(["redis-benchmark", "-p", port, "-q", "-n", "2000000", "-c",
                                  "8", "-r", "100000", "-t", "set,get,lpush,lpop,sadd,hset"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)
            first = scan(srv.pid)
            time.sleep(2)
            second = scan(srv.pid)
        finally:
            bench.kill()
            bench.wait()
        for doc in (first, second):
            nothing_lost(doc)
            assert doc["heap"]["allocator"] == "unknown"  # jemalloc: never walked
            assert doc["stop"]["threads"] >= 2
        r = subprocess.run(["redis-cli", "-p", port, "set", "k", "v"], capture_output=True,
                           text=True)
        assert r.stdout.strip() == "OK"
    finally:
        srv.kill()
        srv.wait()


def test_refusals_with_the_module(pmm: None, cache: Path) -> None:
    """Not monitored (exit 6, what to do); sampled (32); the pprof written
    when it scans; a pid that is not there (5)."""
    p = subprocess.Popen([str(PROGS / "unreach")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=clean_env())
    try:
        r = pmctl("unreachable", str(p.pid))
        assert r.exit_code == 6 and "not monitored" in r.stderr, r.stderr
        assert f"pmctl attach {p.pid}" in r.stderr and "without --sample" in r.stderr
        r = pmctl("attach", "--sample", "4096", str(p.pid))
        assert r.exit_code == 0, r.stderr
        r = pmctl("unreachable", str(p.pid))
        assert r.exit_code == 32 and "sampled mode" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()
    r = pmctl("unreachable", "999999")
    assert r.exit_code == 5, r.stderr


def test_pprof_and_text(pmm: None, cache: Path, tmp_path: Path) -> None:
    import gzip

    from pmm.pprof import profile_pb2

    srv = preloaded([str(PROGS / "unreach")])
    srv.do("req 3")
    settle()
    out = tmp_path / "lost.pb.gz"
    r = pmctl("unreachable", str(srv.pid), "--pprof", str(out))
    assert r.exit_code == 0, r.stderr
    assert re.search(rf"pid {srv.pid} \(unreach\): 3 blocks \(168 B\) definitely lost", r.stdout)
    assert re.search(r"168 B\s+3\s+0 B\s+0\s+handle_request\(\) unreach.c:\d+", r.stdout), \
        r.stdout
    assert re.search(r"0 B\s+0\s+384 B\s+3\s+handle_request\(\) unreach.c:\d+", r.stdout)
    assert "|request 0 body...." in r.stdout  # the body's first bytes
    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress(out.read_bytes()))
    assert sorted(list(s.value) for s in prof.sample) == [[0, 0, 3, 384], [3, 168, 0, 0]]
    srv.finish()


def test_pmd_scans_a_process_at_its_leak_alert(pmm: None, cache: Path, tmp_path: Path) -> None:
    """pmd --scan-on-leak (as root: it may ptrace): examples/leak's LEAK alert
    is followed by a scan whose lost bytes are at leak_here, in the
    database, the log, /metrics and `pmctl report`'s page."""
    import sqlite3
    import urllib.request

    from test_pmd_e2e import Pmd

    from pmm.kernel.device import Device

    with Device.open() as dev:
        dev.set_config(interval_ms=100)
    db = tmp_path / "pmm.db"
    pmd = Pmd(db, "--detect-every", "10", "--scan-on-leak", "--metrics", "127.0.0.1:9478")
    leak = None
    try:
        assert pmd.wait_log("detector ready", 900), pmd.text()
        leak = subprocess.Popen([str(TOP / "examples" / "bin" / "leak"), "-n", "100000000",
                                 "-b", "16384", "-s", "10"], stdout=subprocess.DEVNULL,
                                env={**clean_env(), "LD_PRELOAD": str(HOOK), "PMM_START": "1",
                                     "PMM_QUIET": "1"})
        assert pmd.wait_log(f"LEAK pid {leak.pid} (leak)", 900), pmd.text()
        assert pmd.wait_log(f"pid {leak.pid} (leak): ", 900) and \
            pmd.wait_log("definitely lost", 600), pmd.text()
        c = sqlite3.connect(db)
        (blocks, lost, err), = c.execute(
            "SELECT definite_blocks, definite_bytes, error FROM scans WHERE pid = ?",
            (leak.pid,)).fetchall()
        assert err is None and blocks > 0 and lost == 16384 * blocks, (blocks, lost, err)
        where, = c.execute("SELECT where_ FROM scan_sites WHERE pid = ? ORDER BY "
                           "definite_bytes DESC LIMIT 1", (leak.pid,)).fetchone()
        assert "leak_here" in where, where
        def exported() -> float | None:
            """The definitely lost bytes /metrics gives the leak (published
            every half second: the log line comes first)."""
            text = urllib.request.urlopen("http://127.0.0.1:9478/metrics", timeout=60).read()
            for line in text.decode().splitlines():
                if line.startswith("pmm_process_unreachable_bytes{") and \
                        f'pid="{leak.pid}"' in line and 'kind="definite"' in line:
                    return float(line.rsplit(" ", 1)[1])
            return None

        for _ in range(100):
            if exported() is not None:
                break
            time.sleep(0.2)
        assert exported() == lost
        page = tmp_path / "report.html"
        r = pmctl("report", str(leak.pid), "-o", str(page), "--db", str(db))
        assert r.exit_code == 0, r.stderr
        assert "Unreachable blocks" in page.read_text()
    finally:
        if leak is not None:
            leak.kill()
            leak.wait()
        pmd.stop()
