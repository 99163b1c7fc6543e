"""Who can read pmd's database: the modes pmd gives it (and its -wal, -shm
and directory), tightening a loose one, a reader in the group that cannot
write the directory (pmd running and stopped; the real `pmctl trend`), and
file names that mean something in a URI. Readers are real processes with
another uid (fork + setresuid), so no root privilege hides a failure."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from as_user import as_user

from pmm.store import ProcessRow, SampleRow, Store

TOP = Path(__file__).resolve().parents[2]
NOBODY = 65534  # uid and gid (nogroup) of Debian's nobody
OTHER_GID = 65533  # a group the database is not given to
PID, START = 4_000_123, 7_000_000_000


@pytest.fixture(autouse=True)
def _root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run readers as another uid")


@pytest.fixture()
def group(monkeypatch: pytest.MonkeyPatch) -> int:
    """The database's group: nobody's group stands in for pmm."""
    import grp

    monkeypatch.setenv("PMM_GROUP", grp.getgrgid(NOBODY).gr_name)
    return NOBODY


@pytest.fixture()
def shared() -> Iterator[Path]:
    """A directory other uids can search (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="pmm-db-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


def mode(p: Path) -> tuple[int, int]:
    st = os.stat(p)
    return stat.S_IMODE(st.st_mode), st.st_gid


def fill(db: Path, n: int = 40) -> Store:
    st = Store.open(db)
    st.write([SampleRow(PID, START, 1_000_000_000 + i * 100_000_000, 1 << 30, 4 << 20)
              for i in range(n)], [ProcessRow(PID, START, "daemon", "/bin/d", "d -x", 1)])
    return st


def read_count(db: Path) -> Callable[[], Any]:
    def go() -> Any:
        st = Store.open(db, readonly=True)
        try:
            return st.sample_count()
        finally:
            st.close()

    return go


def test_new_database_is_0640_group_pmm(tmp_path: Path, group: int) -> None:
    db = tmp_path / "state" / "pmm.db"
    st = fill(db)
    assert mode(db.parent) == (0o750, group)
    assert mode(db) == (0o640, group)
    # written while pmd runs: -wal and -shm no more open than the database
    assert mode(Path(f"{db}-wal")) == (0o640, group)
    assert mode(Path(f"{db}-shm")) == (0o640, group)
    st.close()
    assert mode(db) == (0o640, group)


def test_systemd_state_directory_is_given_to_the_group(
        tmp_path: Path, group: int, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "pmm"
    state.mkdir(0o750)  # as StateDirectory=pmm, StateDirectoryMode=0750 makes it
    monkeypatch.setenv("STATE_DIRECTORY", str(state))
    fill(state / "pmm.db").close()
    assert mode(state) == (0o750, group)
    assert mode(state / "pmm.db") == (0o640, group)


def test_without_the_group_only_the_owner(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PMM_GROUP", "no-such-group-for-pmm")
    db = tmp_path / "state" / "pmm.db"
    st = fill(db)
    assert mode(db.parent)[0] == 0o700
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        assert mode(p)[0] == 0o600, p
    st.close()


def test_loose_database_is_tightened_once(tmp_path: Path, group: int,
                                          caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "pmm.db"
    c = sqlite3.connect(db)  # as an older pmd made it: 0644, and a -wal kept by kill -9
    c.execute("PRAGMA journal_mode=wal")
    c.execute("CREATE TABLE samples (pid, start_time, time)")
    c.close()
    os.chmod(db, 0o644)
    Path(f"{db}-wal").touch(0o666)
    os.chmod(f"{db}-wal", 0o666)
    caplog.set_level(logging.INFO, logger="pmd")
    Store.open(db).close()
    assert mode(db) == (0o640, group)
    msgs = [r.getMessage() for r in caplog.records if "tightened" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "pmm.db 0644 -> 0640 group nogroup" in msgs[0]
    caplog.clear()
    Store.open(db).close()
    assert not [r for r in caplog.records if "tightened" in r.getMessage()]
    # another owner's database: its owner chose its mode
    os.chmod(db, 0o644)
    os.chown(db, NOBODY, -1)
    Store.open(db).close()
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o644


def test_group_member_reads_while_pmd_runs_and_after(shared: Path, group: int) -> None:
    db = shared / "state" / "pmm.db"
    st = fill(db)
    # pmd running: SQLite reads the -shm read-only
    assert as_user(NOBODY, group, read_count(db)) == 40
    st.close()
    assert not Path(f"{db}-wal").exists()  # a clean close removes -wal and -shm
    # pmd stopped: no -shm, and the reader cannot create one in pmd's directory
    assert as_user(NOBODY, group, read_count(db)) == 40
    out = as_user(NOBODY, OTHER_GID, read_count(db))
    assert out[0] == "error" and "Permission denied" in out[1]


def test_pmctl_trend_as_group_member_while_pmd_is_stopped(shared: Path, group: int) -> None:
    # the interpreter here lives under /root: the command runs in a forked child
    from typer.testing import CliRunner

    from pmctl.cli import app

    db = shared / "state" / "pmm.db"
    fill(db).close()

    def trend() -> Any:
        r = CliRunner().invoke(app, ["trend", str(PID), "--db", str(db), "--json"])
        return [r.exit_code, r.stdout, r.stderr]

    code, out, err = as_user(NOBODY, group, trend)
    assert code == 13, err  # INCONCLUSIVE: 4 s of an unmoving rss rule nothing out
    doc = json.loads(out)
    assert (doc["pid"], doc["samples"], doc["comm"], doc["db"]) == (PID, 40, "daemon", str(db))


@pytest.mark.parametrize("name", ["a?b.db", "c#d.db", "e%41f.db", "g%3Fh?mode=rwc.db"])
def test_names_that_mean_something_in_a_uri(shared: Path, name: str) -> None:
    db = shared / name
    fill(db).close()
    assert os.listdir(shared) == [name]
    st = Store.open(db, readonly=True)
    assert st.sample_count() == 40
    assert st.processes(PID)[0].cmdline == "d -x"
    st.close()
    # read that file and made no other (a reader that may write the
    # directory leaves the database's own -wal and -shm)
    assert set(os.listdir(shared)) <= {name, f"{name}-wal", f"{name}-shm"}



@pytest.fixture()
def system_db(shared: Path, group: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pmd's system database (/var/lib/pmm/pmm.db) as pmd.service leaves it:
    0640 in a 0750 directory, both given to the group."""
    import pmm.store.files

    db = shared / "lib" / "pmm" / "pmm.db"
    db.parent.parent.mkdir()
    fill(db).close()
    monkeypatch.setattr(pmm.store.files, "SYSTEM_DB_PATH", db)
    return db


def trend_without_db() -> Any:
    from typer.testing import CliRunner

    from pmctl.cli import app

    r = CliRunner().invoke(app, ["trend", str(PID), "--source", "db", "--json"])
    return [r.exit_code, r.stdout, r.stderr]


@pytest.fixture()
def trend_imported(system_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One `pmctl trend` as root first: the modules it imports on the way (the
    interpreter's own, under /root) are then loaded when a child that may not
    read /root runs it."""
    monkeypatch.setenv("PMM_DB", str(system_db))
    assert trend_without_db()[0] == 13  # INCONCLUSIVE: an unmoving rss, seconds of it
    monkeypatch.delenv("PMM_DB")


@pytest.mark.usefixtures("trend_imported")
def test_group_member_finds_the_system_database_without_db(system_db: Path, group: int,
                                                           shared: Path) -> None:
    """A user in the database's group (a supplementary group, as `adduser me
    pmm` makes it) reads it without --db; pmd run by that user still writes
    its own."""
    from pmm.store import default_db_path

    env: dict[str, str | None] = {"PMM_DB": None, "HOME": str(shared / "home")}
    assert as_user(NOBODY, OTHER_GID, lambda: str(default_db_path()), env, [group]) == \
        str(system_db)
    assert as_user(NOBODY, OTHER_GID, lambda: str(default_db_path(writer=True)), env,
                   [group]) == f"{shared}/home/.local/share/pmm/pmm.db"
    code, out, err = as_user(NOBODY, OTHER_GID, trend_without_db, env, [group])
    assert code == 13, err  # INCONCLUSIVE: 4 s of an unmoving rss rule nothing out
    doc = json.loads(out)
    assert (doc["db"], doc["samples"], doc["comm"]) == (str(system_db), 40, "daemon")


def test_outsider_is_told_why_there_is_no_database(system_db: Path, shared: Path) -> None:
    """Not in the group: the lookup falls back to the user's own path, and the
    message says the system database is there but closed to this user."""
    from pmm.store import Store, default_db_path

    env: dict[str, str | None] = {"PMM_DB": None, "HOME": str(shared / "home")}
    own = f"{shared}/home/.local/share/pmm/pmm.db"
    assert as_user(NOBODY, OTHER_GID, lambda: str(default_db_path()), env) == own
    out = as_user(NOBODY, OTHER_GID, lambda: Store.open(default_db_path(), readonly=True), env)
    assert out == ["error", f"DatabaseNotFound: no database at {own}: No such file or "
                   "directory (pmd writes it: is pmd running? Pass --db or set PMM_DB); this "
                   f"user cannot read pmd's system database {system_db} (members of group "
                   "nogroup can)"]


@pytest.mark.usefixtures("trend_imported")
def test_permission_denied_says_where_and_who_may(system_db: Path, shared: Path,
                                                  group: int) -> None:
    from pmm.store import Store

    def read(db: Path) -> Callable[[], Any]:
        return lambda: Store.open(db, readonly=True)

    out = as_user(NOBODY, OTHER_GID, read(system_db))
    enter = (f"cannot open the database {system_db}: Permission denied (this user cannot enter "
             f"{system_db.parent}: 0750 root:nogroup; members of group nogroup can enter it)")
    assert out == ["error", f"DatabasePermissionDenied: {enter}"]
    # through pmctl: the same line, and pmctl's exit status for permission denied
    code, out, err = as_user(NOBODY, OTHER_GID, trend_without_db, {"PMM_DB": str(system_db)})
    assert (code, out, err) == (4, "", f"pmctl: {enter}\n")
    os.chmod(system_db.parent, 0o755)
    out = as_user(NOBODY, OTHER_GID, read(system_db))
    assert out == ["error", f"DatabasePermissionDenied: cannot open the database {system_db}: "
                   "Permission denied (this user cannot read it: 0640 root:nogroup; members of "
                   "group nogroup can read it)"]


def test_pmd_as_a_user_that_may_not_write(shared: Path) -> None:
    """pmd's own errors for a non-root user: a directory it cannot create
    files in, a database it cannot write; one line each, exit 1."""
    from typer.testing import CliRunner

    from pmd.main import app

    def pmd(db: Path) -> Callable[[], Any]:
        def go() -> Any:
            r = CliRunner().invoke(app, ["--no-genl", "--pid", str(os.getpid()), "--db", str(db)])
            return [r.exit_code, r.stderr]
        return go

    secret = shared / "secret.db"
    fill(secret).close()
    os.chmod(secret, 0o600)
    assert as_user(NOBODY, NOBODY, pmd(secret)) == [
        1, f"pmd: cannot open the database {secret}: Permission denied (this user "
        "cannot read it: 0600 root:root)\n"]
    locked = shared / "locked"
    locked.mkdir(0o755)
    assert as_user(NOBODY, NOBODY, pmd(locked / "pmm.db")) == [
        1, f"pmd: cannot open the database {locked}/pmm.db: Permission denied (this "
        f"user cannot create files in {locked}: 0755 root:root)\n"]
    fill(locked / "pmm.db").close()
    os.chmod(locked / "pmm.db", 0o644)
    assert as_user(NOBODY, NOBODY, pmd(locked / "pmm.db")) == [
        1, f"pmd: cannot open the database {locked}/pmm.db: Permission denied (this "
        "user cannot write it: 0644 root:root)\n"]
    open_dir = shared / "open"
    open_dir.mkdir()
    fill(open_dir / "pmm.db").close()
    os.chmod(open_dir / "pmm.db", 0o666)
    os.chmod(open_dir, 0o755)
    assert as_user(NOBODY, NOBODY, pmd(open_dir / "pmm.db")) == [
        1, f"pmd: cannot open the database {open_dir}/pmm.db: Permission denied (this "
        f"user cannot create its -wal file in {open_dir}: 0755 root:root)\n"]
