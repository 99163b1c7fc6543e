"""`pmd --scan-on-leak` without the module: a LEAK alert asks the worker for a
scan (unless pmd may not ptrace the process: said once); a scan's result is
stored beside the alert (scans, scan_sites), logged, shown in the metrics
and in `pmctl report`'s page; a refused ptrace is explained once. The scan
itself runs in the guest (tests/guest/test_unreachable.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pmm.daemon import Daemon, Options, scans
from pmm.daemon.procstate import ProcState
from pmm.daemon.worker import ScanDone
from pmm.store import ScanRow, ScanSiteRow, Store

TOP = Path(__file__).resolve().parents[2]
PID, START = 4_000_301, 987_650_000_000


def make_daemon(tmp_path: Path, scan: bool = True) -> tuple[Daemon, Store]:
    store = Store.open(tmp_path / "pmm.db")
    d = Daemon(store, Options(db=tmp_path / "pmm.db", pids=[], scan_on_leak=scan))
    return d, store


def state(d: Daemon) -> ProcState:
    st = ProcState((PID, START), "server", "kmod", 60)
    d.procs[st.key] = st
    return st


ROW = ScanRow(PID, START, 5_000, 1.7e9, definite_blocks=10, definite_bytes=560,
              indirect_blocks=10, indirect_bytes=1280, unknown_blocks=2, young_blocks=1,
              longest_stop_us=640, scan_us=1400,
              sites=(ScanSiteRow(7, "handle_request() server.c:57", 10, 560, 0, 0),
                     ScanSiteRow(9, "strdup", 0, 0, 10, 1280)))


def test_a_scan_is_stored_logged_and_in_the_metrics(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    d, store = make_daemon(tmp_path)
    st = state(d)
    with caplog.at_level(logging.INFO, logger="pmd"):
        d.scans.scanned(ScanDone(st.key, "server", ROW))
    (got,) = store.scans(PID, START)
    assert got == ROW
    assert (st.lost_bytes, st.indirect_bytes) == (560, 1280)
    (p,) = d.snapshot().processes
    assert (p.lost_bytes, p.indirect_bytes) == (560, 1280)
    assert f"pid {PID} (server): 10 blocks (560 B) definitely lost, 10 (1.2 KiB) indirectly, " \
        "in 2 sites; most at handle_request() server.c:57 (stopped 0.6 ms, scanned in 1.4 ms)" \
        in caplog.text
    assert store.scans(PID, START + 1) == [] and store.scans(PID + 1) == []


def test_a_refused_ptrace_is_explained_once(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    d, store = make_daemon(tmp_path)
    err = ScanRow(PID, START, 6_000, 1.7e9,
                  error="ptrace of process 4000301 refused (Operation not permitted): scan "
                        "as its user or root")
    with caplog.at_level(logging.DEBUG, logger="pmd"):
        d.scans.scanned(ScanDone((PID, START), "server", err))
        d.scans.scanned(ScanDone((PID, START), "server", ScanRow(PID, START, 7_000, 1.7e9,
                                                               error=err.error)))
    said = [r for r in caplog.records if "SystemCallFilter=@debug" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert [s.error for s in store.scans(PID, START)] == [err.error, err.error]
    assert d.scans.scan_failures == 2


def test_leak_alert_asks_for_a_scan_unless_not_permitted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    d, _ = make_daemon(tmp_path)
    st = state(d)
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(d.worker, "scan", lambda key, comm, age: asked.append(key))
    monkeypatch.setattr(scans, "ptrace_refusal", lambda pid: "")
    d.scans.request(st)
    assert asked == [st.key]
    monkeypatch.setattr(scans, "ptrace_refusal", lambda pid: "no CAP_SYS_PTRACE")
    with caplog.at_level(logging.WARNING, logger="pmd"):
        d.scans.request(st)
        d.scans.request(st)
    assert asked == [st.key]
    assert caplog.text.count("--scan-on-leak: no CAP_SYS_PTRACE") == 1


def test_ptrace_refusal_names_the_missing_capability() -> None:
    """As nobody (no capability): pid 1 (root's) is refused with what to do;
    its own process is not."""
    code = ("import os, sys; from pmm.daemon.scans import ptrace_refusal; "
            "print(repr(ptrace_refusal(1))); print(repr(ptrace_refusal(os.getpid())))")
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(TOP / "src")}, cwd="/")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert "has no CAP_SYS_PTRACE" in first and "SystemCallFilter=@debug" in first
    assert second == "''"


def test_the_report_shows_the_last_scan(tmp_path: Path) -> None:
    from pmm.report import data as report_data
    from pmm.report.html import render
    from pmm.store import ProcessRow

    store = Store.open(tmp_path / "pmm.db")
    store.write(processes=[ProcessRow(PID, START, "server", "/srv/server", "server", START,
                                      None, "kmod")])
    store.add_scan(ROW)
    d = report_data.gather(PID, device=None, store=store, start_time=START,
                           device_note="no module", stacks=lambda *a, **k: {})
    assert d.scan == ROW
    page = render(d)
    assert '<section id="unreachable"><h2>Unreachable blocks</h2>' in page
    assert "560 B in 10 blocks nothing reaches" in page
    assert "handle_request() server.c:57" in page
