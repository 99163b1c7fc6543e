"""The store's errors: what keeps a database from being opened, read or
written, each one line naming the path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pmm.errors import PermissionDenied, PmmError


class StoreError(PmmError):
    """The database cannot be opened, read or written."""


class DatabaseNotFound(StoreError):
    """No database file at the path, or no directory to create it in."""


class DatabasePermissionDenied(StoreError, PermissionDenied):
    """The file, or a directory on its path, is closed to this user."""


class NotADatabase(StoreError):
    """The path is a directory, or a file that is not a pmm database (another
    kind of file, another program's SQLite database)."""


class BadRowError(StoreError):
    """The database refused the rows themselves (a value out of SQLite's
    range, a missing required value): writing them again cannot succeed,
    unlike a StoreError about the database (full, read-only, locked)."""


# errors about the values written (sqlite3 binding a value it cannot store,
# a constraint), not about the database
ROW_ERRORS = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
               sqlite3.ProgrammingError, OverflowError, TypeError, ValueError)



def describe(e: sqlite3.Error, path: Path, doing: str) -> StoreError:
    """The StoreError for SQLite's error e while `doing` (its words, and a
    hint at the usual cause)."""
    msg = str(e)
    hint = ""
    low = msg.lower()
    if "not a database" in low or "malformed" in low:
        return NotADatabase(f"{doing} {path}: not a pmm database (another kind of file, or "
                            f"a damaged database: {msg})")
    if "readonly" in low or "read-only" in low:
        hint = " (the file or its file system is read-only; choose another with --db or PMM_DB)"
    elif "full" in low:
        hint = " (the disk is full; free space or choose another --db)"
    elif "i/o error" in low:
        hint = " (the file system failed to read or write the file)"
    elif "unable to open" in low:
        hint = " (check that the directory exists and is writable, or pass --db)"
    elif "locked" in low or "busy" in low:
        hint = " (another process holds a write lock)"
    return StoreError(f"{doing} {path}: {msg}{hint}")

