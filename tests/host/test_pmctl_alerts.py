"""`pmctl alerts [PID]`: pmd's alerts read from its database, so nobody needs
sqlite3. The database is a real SQLite file written through pmm.store's API,
as pmd writes it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pmm.store import AlertRow, Store

TOP = Path(__file__).resolve().parents[2]
S = 1_000_000_000
WALL = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
START_A, START_B = 5 * S, 7 * S

ALERT_A = AlertRow(pid=111, start_time=START_A, time=100 * S, wall_time=WALL, comm="leaky",
                   verdict="LEAK", slope=125337395 / 60, slope_low=1.0e6, slope_high=2.5e6,
                   confidence=0.95, growth=3.0e8, site=7,
                   message="LEAK pid 111 (leaky): rss +122399.8 KiB/min", kind="LEAK",
                   evidence={"kind": "LEAK", "heap_known": True, "mappings": []})
ALERT_B = AlertRow(pid=222, start_time=START_B, time=160 * S, wall_time=WALL + 90,
                   comm="svc", verdict="LEAK", slope=2048.0, slope_low=1500.0,
                   slope_high=2500.0, confidence=0.9, growth=1.0e6, site=None,
                   message="LEAK pid 222 (svc): rss +120.0 KiB/min")


def pmctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "TZ": "UTC", "PMM_DEVICE": "/nonexistent/pmm"}
    e.pop("PMM_DB", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pmctl", *args], capture_output=True,
                          text=True, env=e, cwd=TOP, timeout=60)


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    path = tmp_path / "state" / "pmm.db"
    store = Store.open(path)
    try:
        assert store.add_alert(ALERT_A) and store.add_alert(ALERT_B)
        store.set_site(111, START_A, 7, "grow() leak.c:12")
    finally:
        store.close()
    return path


def test_alerts_table(db: Path) -> None:
    r = pmctl("alerts", "--db", str(db))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["TIME", "PID", "COMM", "VERDICT", "STATE", "KIND",
                                             "RATE", "SITE", "MESSAGE"]
    assert [re.split(r"\s{2,}", ln.strip()) for ln in lines[1:]] == [
        ["2023-11-14 22:13:20", "111", "leaky", "LEAK", "active", "LEAK", "+119.5 MiB/min",
         "grow() leak.c:12", "LEAK pid 111 (leaky): rss +122399.8 KiB/min"],
        ["2023-11-14 22:14:50", "222", "svc", "LEAK", "active", "-", "+120.0 KiB/min", "-",
         "LEAK pid 222 (svc): rss +120.0 KiB/min"],
    ]
    assert r.stderr == ""
    # one process's
    r = pmctl("alerts", "222", "--db", str(db))
    assert [ln.split()[2] for ln in r.stdout.splitlines()[1:]] == ["222"]


def test_alerts_json(db: Path) -> None:
    r = pmctl("alerts", "--json", "--db", str(db))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["db"] == str(db)
    assert doc["alerts"] == [
        {"pid": 111, "start_time": START_A, "time": 100 * S, "wall_time": WALL,
         "comm": "leaky", "verdict": "LEAK", "slope": 125337395 / 60, "slope_low": 1.0e6,
         "slope_high": 2.5e6, "confidence": 0.95, "growth": 3.0e8, "site": 7,
         "resolved": None, "resolved_wall": None,
         "kind": "LEAK", "evidence": {"kind": "LEAK", "heap_known": True, "mappings": []},
         "where": "grow() leak.c:12", "message": "LEAK pid 111 (leaky): rss +122399.8 KiB/min"},
        {"pid": 222, "start_time": START_B, "time": 160 * S, "wall_time": WALL + 90,
         "comm": "svc", "verdict": "LEAK", "slope": 2048.0, "slope_low": 1500.0,
         "slope_high": 2500.0, "confidence": 0.9, "growth": 1.0e6, "site": None,
         "resolved": None, "resolved_wall": None, "kind": None, "evidence": None, "where": None,
         "message": "LEAK pid 222 (svc): rss +120.0 KiB/min"},
    ]
    r = pmctl("alerts", "111", "--json", "--db", str(db))
    assert [a["pid"] for a in json.loads(r.stdout)["alerts"]] == [111]


def test_alerts_default_database_is_pmds(db: Path) -> None:
    """Without --db: $PMM_DB, as pmd (pmm.store.default_db_path)."""
    r = pmctl("alerts", "--json", env={"PMM_DB": str(db)})
    assert r.returncode == 0, r.stderr
    assert [a["pid"] for a in json.loads(r.stdout)["alerts"]] == [111, 222]


def test_alerts_none_yet(tmp_path: Path) -> None:
    path = tmp_path / "pmm.db"
    Store.open(path).close()  # as pmd creates it, before any alert
    r = pmctl("alerts", "--db", str(path))
    assert (r.returncode, r.stdout, r.stderr) == (0, f"no alerts in {path}\n", "")
    r = pmctl("alerts", "5", "--db", str(path))
    assert r.stdout == f"no alerts for pid 5 in {path}\n"
    r = pmctl("alerts", "--db", str(path), "--json")
    assert json.loads(r.stdout) == {"db": str(path), "alerts": []}


def test_alerts_without_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "pmm.db"
    for env in ({}, {"PMM_DB": str(missing)}):
        args = ["alerts"] if env else ["alerts", "--db", str(missing)]
        r = pmctl(*args, env=env or None)
        assert (r.returncode, r.stdout) == (1, "")
        (line,) = r.stderr.splitlines()  # pmm.store's words: the path, and who writes it
        assert line.startswith(f"pmctl: no database at {missing}: ")
        assert "pmd writes it" in line
    assert not missing.parent.exists()  # a reader creates nothing


def test_resolved_alerts_show_as_resolved(db: Path) -> None:
    """pmd marks an alert resolved when the verdict clears: `alerts` says so
    and when; the process may alert again after that, not before."""
    store = Store.open(db)
    try:
        assert store.resolve_alerts(111, START_A, 200 * S, WALL + 600) == 1
        assert store.resolve_alerts(111, START_A, 300 * S, WALL + 900) == 0  # none stands
        again = AlertRow(**{**ALERT_A.__dict__, "time": 400 * S, "wall_time": WALL + 1200})
        assert store.add_alert(again)
        assert not store.add_alert(again)  # one standing alert per process
    finally:
        store.close()
    r = pmctl("alerts", "111", "--db", str(db))
    rows = [re.split(r"\s{2,}", ln.strip()) for ln in r.stdout.splitlines()[1:]]
    assert [row[3:5] for row in rows] == [["LEAK", "resolved 2023-11-14 22:23:20"],
                                          ["LEAK", "active"]]
    got = json.loads(pmctl("alerts", "111", "--json", "--db", str(db)).stdout)["alerts"]
    assert [(a["resolved"], a["resolved_wall"]) for a in got] == [(200 * S, WALL + 600),
                                                                  (None, None)]


def test_an_older_database_gets_the_resolved_columns(tmp_path: Path) -> None:
    """A database from before alerts resolved: readers see its alerts as
    standing; pmd adds the columns when it opens it."""
    import sqlite3

    path = tmp_path / "old.db"
    c = sqlite3.connect(path)
    c.executescript(
        "CREATE TABLE processes (pid INTEGER, start_time INTEGER, comm TEXT, exe TEXT, "
        "cmdline TEXT, started INTEGER, exited INTEGER, source TEXT, "
        "PRIMARY KEY (pid, start_time));"
        "CREATE TABLE samples (pid INTEGER, start_time INTEGER, time INTEGER, vm INTEGER, "
        "rss INTEGER, PRIMARY KEY (pid, start_time, time));"
        "CREATE TABLE alerts (id INTEGER PRIMARY KEY, pid INTEGER, start_time INTEGER, "
        "time INTEGER, wall_time FLOAT, comm TEXT, verdict TEXT, slope FLOAT, "
        "slope_low FLOAT, slope_high FLOAT, confidence FLOAT, growth FLOAT, site INTEGER, "
        "message TEXT);"
        f"INSERT INTO alerts VALUES (1, 111, {START_A}, {100 * S}, {WALL}, 'leaky', 'LEAK', "
        "1.0, 0.5, 2.0, 0.95, 3.0, NULL, 'LEAK pid 111');")
    c.commit()
    c.close()
    r = pmctl("alerts", "--db", str(path))
    assert r.returncode == 0, r.stderr
    assert re.split(r"\s{2,}", r.stdout.splitlines()[1].strip())[3:5] == ["LEAK", "active"]
    store = Store.open(path)  # as pmd: the columns are added
    try:
        assert store.resolve_alerts(111, START_A, 200 * S, WALL + 60) == 1
        assert store.alerts(111)[0].resolved == 200 * S
    finally:
        store.close()


def test_alerts_of_an_older_database(tmp_path: Path) -> None:
    """An alerts table without the kind columns (an older pmd's): read with
    kind null; pmd adds the columns when it opens it, keeping the rows."""
    import sqlite3

    path = tmp_path / "old.db"
    Store.open(path).close()
    c = sqlite3.connect(path)
    c.execute("ALTER TABLE alerts DROP COLUMN kind")
    c.execute("ALTER TABLE alerts DROP COLUMN evidence")
    c.execute("INSERT INTO alerts (pid, start_time, time, wall_time, comm, verdict, slope, "
              "slope_low, slope_high, confidence, growth, site, message) VALUES "
              "(9, 1, 2, 3.0, 'old', 'LEAK', 1.0, 0.5, 1.5, 0.95, 10.0, NULL, 'm')")
    c.commit()
    c.close()
    r = pmctl("alerts", "--json", "--db", str(path))
    assert r.returncode == 0, r.stderr
    (a,) = json.loads(r.stdout)["alerts"]
    assert (a["comm"], a["kind"], a["evidence"]) == ("old", None, None)
    store = Store.open(path)
    try:
        assert store.add_alert(ALERT_A)
        assert [(x.pid, x.kind) for x in store.alerts()] == [(9, None), (111, "LEAK")]
        assert store.alerts(111)[0].evidence == ALERT_A.evidence
    finally:
        store.close()
