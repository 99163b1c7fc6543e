"""The connection the store's parts share, and its reading helpers."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # sqlite-utils takes 140 ms to import: only Store.open loads it
    import sqlite_utils

from pmm.store.errors import describe


class Connection:
    """An open pmm database (Store is one, with its writing and reading
    methods): the sqlite-utils Database, its path, and whether it is only read."""

    def __init__(self, db: sqlite_utils.Database, path: Path, readonly: bool) -> None:
        self.db = db
        self.path = path
        self.readonly = readonly

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self.db.conn.execute(sql, tuple(args)).fetchall())
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot read the database") from None

    def _columns(self, table: str) -> set[str]:
        """The table's column names (reading: a database of an older or newer
        pmd may lack or have more of them)."""
        return {str(r[1]) for r in self._query(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        """Closes the database."""
        self.db.close()

    def _has_table(self, name: str) -> bool:
        """Whether the database has the table (an older one may lack the
        newer tables: a reader finds nothing in them)."""
        return bool(self._query(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

