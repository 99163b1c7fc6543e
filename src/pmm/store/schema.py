"""The database's tables: made for a new database, and added (tables,
columns) to one of an older pmd when pmd opens it.

Tables (times are CLOCK_BOOTTIME nanoseconds, sizes bytes; a process is keyed
by (pid, start_time) so that a reused pid never mixes two processes):

processes       pid, start_time, comm, exe, cmdline, started, exited, source
                PRIMARY KEY (pid, start_time). started: when pmd first saw it
                monitored; exited: exit time or NULL; source: "kmod" | "proc".
samples         pid, start_time, time, vm, rss, rss_anon, rss_file, rss_shmem,
                live_bytes, live_blocks, source ("kmod": the module's sampler, with the
                hook's live heap bytes and blocks; "proc": pmd read /proc, live_* NULL),
                heap_free, heap_trimmable, allocator ("glibc", "jemalloc"), cgroup_usage
                (pmm.kernel.model.Sample; NULL when unknown, and in rows of an older pmd)
                PRIMARY KEY (pid, start_time, time)
site_snapshots  pid, start_time, time, site, live_bytes, live_blocks
                PRIMARY KEY (pid, start_time, time, site)
sites           pid, start_time, site, where_, frame PRIMARY KEY (pid,
                start_time, site). A site's description: frame, its fields
                (pmm.symbolize.Frame.as_dict, JSON: function, file, line,
                object, offset...; NULL in rows of an older pmd, whose
                where_ the reader parses), and where_, the same as text
                (Frame.describe), for readers of an older pmd.
alerts          id, pid, start_time, time, wall_time (Unix seconds), comm,
                verdict, slope, slope_low, slope_high (bytes/s), confidence,
                 growth (bytes), site, message, resolved (CLOCK_BOOTTIME ns) and
                 resolved_wall (Unix seconds): when the verdict cleared (NULL
                 while the alert stands), kind (the kind of growth:
                 pmm.analysis.growthkind), evidence (its JSON: the split, the mappings
                 that grew). At most one standing LEAK alert per process; one
                 that resolved may be followed by another.

What pmd keeps of a process once it exited (its "harvest", pmm.store.postmortem),
so that leaks and statistics name file:line after the module dropped it
(exited_ttl_s later, or after a reboot):

exit_info       pid, start_time, harvested, info, objects PRIMARY KEY (pid,
                start_time). info: the module's entry as JSON
                (PidInfo.to_dict: comm, live figures, records, exit time...);
                objects: the files its sites' frames are in (ObjectFile.to_dict:
                path, build-id, dev, inode, size); harvested: when.
exit_sites      pid, start_time, site, registered, flags, func, file, line,
                live_bytes, live_blocks, alloc_bytes, free_bytes, alloc_count,
                oldest_age_s, newest_age_s, histogram, frames, where_
                PRIMARY KEY (pid, start_time, site). Per site, its final
                figures; registered 0 for a site known only by its blocks;
                func/file/line what the program registered (the shim);
                ages (seconds, NULL without a live block) are as of the exit;
                histogram: live blocks per age bucket (pmm.analysis.leaks.AGE_LABELS),
                JSON; alloc_count: calls per operation, JSON; frames: its call
                chain symbolized (Frame.as_dict, JSON; addr always 0: each
                frame is an object and a file offset, or unknown); where_:
                its one-line description (pmm.sitestack.describe_site).
exit_stats      pid, start_time, stats (StatsInfo.to_dict, JSON) PRIMARY KEY
                (pid, start_time).

What `pmd --scan-on-leak` found when a process was called LEAK
(pmm.unreachable: the blocks it can no longer reach):

scans           pid, start_time, time, wall_time, definite_blocks,
                definite_bytes, indirect_blocks, indirect_bytes, unknown_blocks,
                young_blocks, longest_stop_us, scan_us, error (NULL: it
                scanned) PRIMARY KEY (pid, start_time, time)
scan_sites      pid, start_time, time, site, where_, definite_blocks,
                definite_bytes, indirect_blocks, indirect_bytes PRIMARY KEY
                (pid, start_time, time, site): its lost sites, worst first

Older databases get these tables (and the alerts' resolved columns) when pmd
opens them; readers of a database without them find nothing harvested, and
every alert standing.

No absolute address of a process is stored: readers of the database are not
checked for access to the processes (as the module's readers are), and an
address would tell them where a process's code is loaded.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

from pmm.store.errors import NotADatabase
from pmm.store.files import uri

# samples' columns added after the first release (Store._create adds them)
SAMPLE_HEAP_COLUMNS: dict[str, type] = {"heap_free": int, "heap_trimmable": int,
                                         "allocator": str, "cgroup_usage": int}

PMD_TABLES = ("processes", "samples", "site_snapshots", "sites", "alerts", "exit_info",
              "exit_sites", "exit_stats", "scans", "scan_sites")


def _table_names(conn: sqlite3.Connection) -> list[str]:
    """The database's own tables (not SQLite's sqlite_* ones), by name."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
        "ESCAPE '\\' ORDER BY name")]


def existing_tables(path: Path) -> list[str]:
    """The tables of the file at `path` as it is, read without changing it:
    none for a missing or empty file (pmd makes it a database).
    sqlite3.Error when it is not an SQLite database. With a -wal and a -shm
    beside it (a writer may be at work), it is opened read-only, which reads
    the -wal too, under SQLite's locks, and creates neither. Else it is
    opened immutable=1, which takes no lock and makes no -wal or -shm (a
    -wal left by a crash is not read: at worst a database whose tables are
    all in it looks new, and the writer's connection finds them)."""
    try:
        if os.stat(path).st_size == 0:
            return []
    except FileNotFoundError:
        return []
    in_use = os.path.lexists(f"{path}-wal") and os.path.lexists(f"{path}-shm")
    query = "mode=ro" if in_use else "immutable=1"
    conn = sqlite3.connect(uri(path, query), uri=True)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        return _table_names(conn)
    finally:
        conn.close()


def refuse_foreign(path: Path, tables: list[str]) -> None:
    """NotADatabase when the database holds tables and none of pmd's: it is
    another program's, and pmd must not add its tables to it or change its
    mode. A database without tables is a new one."""
    if not tables or set(tables) & set(PMD_TABLES):
        return
    shown = ", ".join(tables[:5]) + (f", ... ({len(tables)} in all)" if len(tables) > 5 else "")
    raise NotADatabase(f"{path} is an SQLite database of something else (tables: {shown}): "
                       "give pmd its own file")



def create(db: sqlite_utils.Database) -> None:
    """Makes the tables and columns the database lacks."""
    with db.atomic():
        if not db.table("processes").exists():
            db.table("processes").create(
                {"pid": int, "start_time": int, "comm": str, "exe": str, "cmdline": str,
                 "started": int, "exited": int, "source": str},
                pk=("pid", "start_time"), not_null={"pid", "start_time"},
            )
        if not db.table("samples").exists():
            db.table("samples").create(
                {"pid": int, "start_time": int, "time": int, "vm": int, "rss": int,
                 "rss_anon": int, "rss_file": int, "rss_shmem": int, "live_bytes": int,
                 "live_blocks": int, "source": str},
                pk=("pid", "start_time", "time"),
                not_null={"pid", "start_time", "time", "vm", "rss"},
            )
        # added with the allocator's figures: an older database gets the columns
        add_columns(db, "samples", SAMPLE_HEAP_COLUMNS)
        if not db.table("site_snapshots").exists():
            db.table("site_snapshots").create(
                {"pid": int, "start_time": int, "time": int, "site": int,
                 "live_bytes": int, "live_blocks": int},
                pk=("pid", "start_time", "time", "site"),
            )
        if not db.table("sites").exists():
            db.table("sites").create(
                {"pid": int, "start_time": int, "site": int, "where_": str, "frame": str},
                pk=("pid", "start_time", "site"),
            )
        # added with the sites' frames as fields: an older database gets the column
        add_columns(db, "sites", {"frame": str})
        if not db.table("alerts").exists():
            db.table("alerts").create(
                {"id": int, "pid": int, "start_time": int, "time": int, "wall_time": float,
                 "comm": str, "verdict": str, "slope": float, "slope_low": float,
                 "slope_high": float, "confidence": float, "growth": float, "site": int,
                 "message": str},
                pk="id",
            )
            db.table("alerts").create_index(["pid", "start_time"])
        # added with resolved alerts and the kind of growth: an older
        # database gets the columns
        add_columns(db, "alerts", {"resolved": int, "resolved_wall": float,
                                     "kind": str, "evidence": str})
        # added with post-mortem records: an older database gets them here
        if not db.table("exit_info").exists():
            db.table("exit_info").create(
                {"pid": int, "start_time": int, "harvested": int, "info": str,
                 "objects": str},
                pk=("pid", "start_time"), not_null={"pid", "start_time", "info"},
            )
        if not db.table("exit_sites").exists():
            db.table("exit_sites").create(
                {"pid": int, "start_time": int, "site": int, "registered": int,
                 "flags": int, "func": str, "file": str, "line": int, "live_bytes": int,
                 "live_blocks": int, "alloc_bytes": int, "free_bytes": int,
                 "alloc_count": str, "oldest_age_s": float, "newest_age_s": float,
                 "histogram": str, "frames": str, "where_": str},
                pk=("pid", "start_time", "site"),
                not_null={"pid", "start_time", "site"},
            )
        if not db.table("exit_stats").exists():
            db.table("exit_stats").create(
                {"pid": int, "start_time": int, "stats": str},
                pk=("pid", "start_time"), not_null={"pid", "start_time", "stats"},
            )
        # added with --scan-on-leak
        if not db.table("scans").exists():
            db.table("scans").create(
                {"pid": int, "start_time": int, "time": int, "wall_time": float,
                 "definite_blocks": int, "definite_bytes": int, "indirect_blocks": int,
                 "indirect_bytes": int, "unknown_blocks": int, "young_blocks": int,
                 "longest_stop_us": int, "scan_us": int, "error": str},
                pk=("pid", "start_time", "time"), not_null={"pid", "start_time", "time"},
            )
        if not db.table("scan_sites").exists():
            db.table("scan_sites").create(
                {"pid": int, "start_time": int, "time": int, "site": int, "where_": str,
                 "definite_blocks": int, "definite_bytes": int, "indirect_blocks": int,
                 "indirect_bytes": int},
                pk=("pid", "start_time", "time", "site"),
                not_null={"pid", "start_time", "time", "site"},
            )


def add_columns(db: sqlite_utils.Database, table: str, columns: dict[str, type]) -> None:
    """Adds the columns the table lacks (a database of an older pmd)."""
    have = set(db.table(table).columns_dict)
    for name, kind in columns.items():
        if name not in have:
            db.table(table).add_column(name, kind)
