"""`pmctl unreachable` against the real module (in the VM): programs that
leak by dropping their last pointer have every leaked block reported lost at
the line marked LOST in their source, with exact counts, while they run,
preloaded and after an attach; programs that do not leak have nothing lost;
a scan changes neither a program's output nor its exit status. The host's
tests/host/test_unreachable.py checks that valgrind's leak check, at exit,
calls exactly the same lines definitely and indirectly lost."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from helpers import PROGS, TOP, pmctl_json

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
