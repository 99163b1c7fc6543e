"""`Store`: opening a pmm database, for writing (made and upgraded as
needed) or only reading."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pmm.store import schema
from pmm.store.errors import NotADatabase, StoreError, describe
from pmm.store.files import db_group, log, open_readonly, prepare_dir, secure_files, why_not
from pmm.store.read import Reading
from pmm.store.retention import Retention
from pmm.store.write import Writing


class Store(Writing, Reading, Retention):
    """A pmm database. `Store.open(path)` creates it (and the tables) if needed;
    `Store.open(path, readonly=True)` only reads an existing one."""

    @classmethod
    def open(cls, path: Path | str, readonly: bool = False,
             create_parents: bool = False) -> Store:
        """The database at `path`. For writing, the file is created (and its
        directory, when that directory's parent exists; every missing
        directory with `create_parents`). StoreError says what is in the way:
        DatabaseNotFound (no such file, or directory),
        DatabasePermissionDenied, NotADatabase (a directory, another kind of
        file, another program's database: left unchanged), or else SQLite's
        own reason."""
        path = Path(path)
        try:
            if readonly:
                why = why_not(path, writer=False)
                if why is not None:
                    raise why
                import sqlite_utils

                db = sqlite_utils.Database(open_readonly(path), execute_plugins=False)
                store = cls(db, path, readonly=True)
                store._check_tables()
                return store
            gid = db_group()
            prepare_dir(path, gid, create_parents)
            why = why_not(path, writer=True)
            if why is not None:
                raise why
            # before anything changes it (mode, group, -wal and -shm, WAL)
            schema.refuse_foreign(path, schema.existing_tables(path))
            changed = secure_files(path, gid)
            import sqlite_utils

            db = sqlite_utils.Database(path, execute_plugins=False)
            db.conn.execute("PRAGMA busy_timeout=5000")
            db.enable_wal()
            # WAL + NORMAL: a crash of pmd (kill -9) loses nothing committed;
            # only a power loss may lose the last transactions.
            db.conn.execute("PRAGMA synchronous=NORMAL")
            if changed:
                log.warning("%s was more open than its contents allow; tightened: %s",
                            path, ", ".join(changed))
            store = cls(db, path, readonly=False)
            store._create()
            return store
        except sqlite3.Error as e:
            # SQLite says "unable to open database file" for most causes: a
            # reason found now (a race, the -wal's directory) is clearer
            raise why_not(path, writer=not readonly) or \
                describe(e, path, "cannot open the database") from None
        except OSError as e:
            raise StoreError(f"cannot open the database {path}: {e.strerror or e}",
                             e.errno) from None

    def _check_tables(self) -> None:
        have = {r[0] for r in self._query(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"processes", "samples"} <= have:
            self.close()
            what = "an empty file" if not have else "an SQLite database without pmd's tables"
            raise NotADatabase(f"cannot open the database {self.path}: not a pmm database "
                               f"({what})")

    def _create(self) -> None:
        schema.create(self.db)
