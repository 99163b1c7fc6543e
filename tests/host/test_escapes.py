"""What a monitored process names itself (comm, its sites' function and
file names, from pmm_hooks.h) reaches people's terminals only escaped:
pmctl's tables and lines, and pmd's log. JSON stays raw."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pmctl import cli
from pmm.kernel.blockstream import pages_of
from pmm.kernel.device import Device
from pmm.kernel.model import SITE_F_SOURCE, Block, PidInfo, Site
from pmm.output import format_table
from pmm.store import ProcessRow, SampleRow, Store
from pmm.text import printable

TOP = Path(__file__).resolve().parents[2]
COMM = "\x1b]0;pwned\x07"  # sets the terminal's title: 10 bytes, fits a comm
FUNC = "f\x1b[2J\x9b31m"  # clears the screen; a C1 CSI
FILE = "a\u202ebad.c\nFAKE LINE"  # a bidi override, a line of its own
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\nFAKE")
PID = 4_000_444  # above pid_max: never a live process


def clean(text: str) -> None:
    for c in RAW:
        assert c not in text, (c, text)


def test_printable() -> None:
    assert printable("sleep 120") == "sleep 120"
    assert printable("d\u00e9mon \u4e2d") == "d\u00e9mon \u4e2d"  # printable non-ASCII stays
    assert printable(COMM) == "\\x1b]0;pwned\\x07"
    assert printable("\x00\t\x7f\x80\x9f\\") == "\\x00\\x09\\x7f\\x80\\x9f\\\\"
    assert printable("a\u202eb\u200bc\U000e0001") == "a\\u202eb\\u200bc\\U000e0001"
    assert printable("\udcff") == "\\udcff"  # an undecodable byte (surrogateescape)
    t = format_table(["COMM", "N"], [[COMM, "1"], ["x", "22"]], right={1})
    # widths are those of the escaped cells
    assert t.splitlines() == ["COMM" + " " * 15 + "N", "\\x1b]0;pwned\\x07   1",
                              "x" + " " * 15 + "  22"]


@pytest.fixture()
def evil_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device (a regular file, ioctl faked) that monitors one process that
    named itself COMM, with one block from a site FUNC() FILE:12."""
    p = tmp_path / "pmm"
    p.write_bytes(b"")
    monkeypatch.setenv("PMM_DEVICE", str(p))
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("pmm.kernel.device.fcntl.ioctl", lambda *a, **k: 0)
    info = PidInfo(pid=PID, ppid=1, state=1, comm=COMM, start_time_ns=1_000_000_000,
                   monitor_start_ns=2_000_000_000, exit_time_ns=0, live_blocks=1,
                   live_bytes=100, records=1, dropped_records=0, unmatched_frees=0,
                   pending_frees=0, samples=0, vm_bytes=8192, rss_bytes=4096)
    site = Site(site=3, flags=SITE_F_SOURCE, frames=(0x1234,), file=FILE, func=FUNC, line=12)
    block = Block(ptr=0x5000, prev_ptr=0, size=100, time_ns=time.monotonic_ns(), site=3,
                  weight=1, op=1)

    def pids(self: Device) -> list[PidInfo]:
        return [info]

    def blocks(self: Device, pid: int) -> list[Block]:
        return [block]

    def sites(self: Device, pid: int) -> list[Site]:
        return [site]

    monkeypatch.setattr(Device, "monitored_pids", pids)
    monkeypatch.setattr(Device, "blocks", blocks)
    monkeypatch.setattr(Device, "block_pages", lambda self, pid: pages_of(blocks(self, pid)))
    monkeypatch.setattr(Device, "sites", sites)
    monkeypatch.setattr(Device, "objects", lambda self, pid: [])


@pytest.mark.parametrize("args", [["status"], ["start", str(PID)], ["logs", str(PID)],
                                  ["leaks", str(PID)]])
def test_pmctl_prints_names_escaped_and_json_raw(evil_dev: None, args: list[str]) -> None:
    r = CliRunner().invoke(cli.app, args)
    assert r.exit_code == 0, r.output
    clean(r.output)
    assert "\\x1b]0;pwned\\x07" in r.output
    if args[0] in ("logs", "leaks"):
        assert "f\\x1b[2J\\x9b31m()" in r.output
        assert "a\\u202ebad.c\\x0aFAKE LINE" in r.output
    if args[0] == "start":
        return
    doc = json.loads(CliRunner().invoke(cli.app, [*args, "--json"]).stdout)
    if args[0] == "status":
        assert doc["pids"][0]["comm"] == COMM
    else:
        assert doc["comm"] == COMM
        site = doc["sites" if args[0] == "leaks" else "blocks"][0]
        assert (site["func"], site["file"]) == (FUNC, FILE)


def test_pmctl_trend_table_escaped(tmp_path: Path) -> None:
    db = tmp_path / "pmm.db"
    st = Store.open(db)
    st.write([SampleRow(PID, 0, 1_000_000_000 + i * 100_000_000, 1 << 30, 4 << 20)
              for i in range(40)], [ProcessRow(PID, 0, COMM, "/x", "x")], (),
             [(PID, 0, 1_000_000_000 + i * 100_000_000, 7, 1000 * i, i) for i in range(0, 40, 10)])
    st.set_site(PID, 0, 7, f"{FUNC}() {FILE}:3")
    st.close()
    r = CliRunner().invoke(cli.app, ["trend", str(PID), "--db", str(db)])
    assert r.exit_code in (0, 10, 11, 13), r.output
    clean(r.output)
    assert f"pid {PID} (\\x1b]0;pwned\\x07)" in r.output
    assert "f\\x1b[2J\\x9b31m() a\\u202ebad.c\\x0aFAKE LINE:3" in r.output
    r = CliRunner().invoke(cli.app, ["trend", str(PID), "--db", str(db), "--json"])
    doc = json.loads(r.stdout)
    assert doc["comm"] == COMM and doc["sites"][0]["where"] == f"{FUNC}() {FILE}:3"


def test_pmd_logs_a_process_name_escaped(tmp_path: Path) -> None:
    """A real process that named itself with an escape sequence (prctl
    PR_SET_NAME), sampled by the real pmd from /proc."""
    named = subprocess.Popen([
        sys.executable, "-c",
        "import ctypes, sys, time\n"
        "ctypes.CDLL(None).prctl(15, b'\\x1b]0;pwned\\x07', 0, 0, 0)\n"
        "print('named', flush=True)\n"
        "time.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    p: subprocess.Popen[str] | None = None
    try:
        assert named.stdout is not None and named.stdout.readline() == "named\n"
        with open(f"/proc/{named.pid}/comm", "rb") as f:
            assert f.read() == COMM.encode() + b"\n"
        p = subprocess.Popen(
            [sys.executable, "-m", "pmd.main", "--no-genl", "--db", str(tmp_path / "pmm.db"),
             "--pid", str(named.pid), "--interval", "0.02", "--detect-every", "1"],
            stderr=subprocess.PIPE, text=True, cwd=TOP)
        assert p.stderr is not None
        lines: list[str] = []
        end = time.monotonic() + 90
        while time.monotonic() < end:
            line = p.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
            if f" pmd: INFO: pid {named.pid} (" in line:  # after the line's time
                break
        p.send_signal(signal.SIGTERM)
        _, rest = p.communicate(timeout=30)
        log = "".join(lines) + rest
    finally:
        named.kill()
        named.wait()
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    clean(log)
    assert f"pmd: INFO: pid {named.pid} (\\x1b]0;pwned\\x07): " in log
    # the database keeps the name as it was
    st = Store.open(tmp_path / "pmm.db", readonly=True)
    assert st.processes(named.pid)[0].comm == COMM
    st.close()

