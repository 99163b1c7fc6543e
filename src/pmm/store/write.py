"""Writing: samples, processes, site descriptions, post-mortem records,
alerts and scans, each call one transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pmm.store.connection import Connection
from pmm.store.errors import ROW_ERRORS, BadRowError, describe
from pmm.store.rows import AlertRow, ExitRecord, ExitSiteRow, ProcessRow, SampleRow, ScanRow

if TYPE_CHECKING:  # the symbolizer's modules load only when a frame is written
    from pmm.symbolize import Frame

SiteRow = tuple[int, int, int, str, str | None]  # pid, start_time, site, where_, frame


def _site_row(pid: int, start_time: int, site: int, where: str | Frame) -> SiteRow:
    """A row of table sites: the description as text and, given a Frame,
    its fields too (text alone: a reader parses it)."""
    if isinstance(where, str):
        return (pid, start_time, site, where, None)
    return (pid, start_time, site, where.describe(), json.dumps(where.as_dict()))


def _exit_site_frame(s: ExitSiteRow) -> Frame | None:
    """The frame that describes a harvested site (pmm.symbolize.site_frame of
    its fields), None when it is not the one its `where` says."""
    from pmm.symbolize import Frame, site_frame

    f = site_frame(s.func, s.file, s.line, [Frame.from_dict(d) for d in s.frames])
    return f if f is not None and f.describe() == s.where else None


class Writing(Connection):
    """Store's writing methods."""

    def write(
        self,
        samples: Sequence[SampleRow] = (),
        processes: Sequence[ProcessRow] = (),
        exits: Sequence[tuple[int, int, int]] = (),
        snapshots: Sequence[tuple[int, int, int, int, int, int]] = (),
        sites: Sequence[tuple[int, int, int, str | Frame]] = (),
    ) -> None:
        """One transaction: new processes (existing ones keep their first
        `started`), exits (pid, start_time, time), samples, site snapshots
        (pid, start_time, time, site, live_bytes, live_blocks) and site
        descriptions (pid, start_time, site, where: the Frame that describes
        the site, or its text; replaces the one stored). Duplicates (same
        key) are ignored, so writing rows again is harmless. Raises
        BadRowError when a row itself is refused, StoreError when the
        database is; nothing is written then."""
        try:
            with self.db.atomic():
                c = self.db.conn
                if processes:
                    c.executemany(
                        "INSERT INTO processes (pid, start_time, comm, exe, cmdline, started, "
                        "exited, source) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(pid, start_time) "
                        "DO UPDATE SET comm = CASE WHEN excluded.comm != '' THEN excluded.comm "
                        "ELSE comm END, exe = CASE WHEN excluded.exe != '' THEN excluded.exe "
                        "ELSE exe END, cmdline = CASE WHEN excluded.cmdline != '' THEN "
                        "excluded.cmdline ELSE cmdline END",
                        [(p.pid, p.start_time, p.comm, p.exe, p.cmdline, p.started, p.exited,
                          p.source) for p in processes],
                    )
                if exits:
                    c.executemany(
                        "UPDATE processes SET exited = ? WHERE pid = ? AND start_time = ? "
                        "AND exited IS NULL",
                        [(t, pid, st) for pid, st, t in exits],
                    )
                if samples:
                    c.executemany(
                        "INSERT OR IGNORE INTO samples (pid, start_time, time, vm, rss, "
                        "rss_anon, rss_file, rss_shmem, live_bytes, live_blocks, source, "
                        "heap_free, heap_trimmable, allocator, cgroup_usage) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        [(s.pid, s.start_time, s.time, s.vm, s.rss, s.rss_anon, s.rss_file,
                          s.rss_shmem, s.live_bytes, s.live_blocks, s.source, s.heap_free,
                          s.heap_trimmable, s.allocator, s.cgroup_usage) for s in samples],
                    )
                if snapshots:
                    c.executemany(
                        "INSERT OR IGNORE INTO site_snapshots (pid, start_time, time, site, "
                        "live_bytes, live_blocks) VALUES (?,?,?,?,?,?)",
                        snapshots,
                    )
                if sites:
                    c.executemany(
                        "INSERT OR REPLACE INTO sites (pid, start_time, site, where_, frame) "
                        "VALUES (?,?,?,?,?)", [_site_row(*r) for r in sites])
        except ROW_ERRORS as e:
            if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
                # the one ProgrammingError about the connection, not a row
                raise describe(e, self.path, "cannot write to the database") from None
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

    def set_site(self, pid: int, start_time: int, site: int, where: str | Frame) -> None:
        """Stores a site's description (its Frame, or its text), replacing
        any; StoreError when the database refuses."""
        try:
            with self.db.atomic():
                self.db.conn.execute(
                    "INSERT OR REPLACE INTO sites (pid, start_time, site, where_, frame) "
                    "VALUES (?,?,?,?,?)", _site_row(pid, start_time, site, where))
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

    def write_exit(self, r: ExitRecord) -> None:
        """Stores what is kept of an exited process, in one transaction: its
        entry, sites and statistics (replacing an earlier record of the same
        process: a second harvest changes nothing), the descriptions of its
        sites (table sites) and its exit time if none was stored (and its
        process row if pmd had none). Raises BadRowError when a row itself
        is refused, StoreError when the database is; nothing is written then."""
        key = (r.pid, r.start_time)
        try:
            with self.db.atomic():
                c = self.db.conn
                c.execute(
                    "INSERT OR IGNORE INTO processes (pid, start_time, comm, exe, cmdline, "
                    "started, exited, source) VALUES (?,?,?,'','',?,?,'kmod')",
                    (*key, r.comm, r.harvested, r.exit_time or r.harvested))
                if r.exit_time:
                    c.execute("UPDATE processes SET exited = ? WHERE pid = ? AND start_time = ? "
                              "AND exited IS NULL", (r.exit_time, *key))
                c.execute("INSERT OR REPLACE INTO exit_info (pid, start_time, harvested, info, "
                          "objects) VALUES (?,?,?,?,?)",
                          (*key, r.harvested, json.dumps(r.info),
                           json.dumps(list(r.objects))))
                c.execute("DELETE FROM exit_sites WHERE pid = ? AND start_time = ?", key)
                c.executemany(
                    "INSERT INTO exit_sites (pid, start_time, site, registered, flags, func, "
                    "file, line, live_bytes, live_blocks, alloc_bytes, free_bytes, alloc_count, "
                    "oldest_age_s, newest_age_s, histogram, frames, where_) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [(*key, s.site, int(s.registered), s.flags, s.func, s.file, s.line,
                      s.live_bytes, s.live_blocks, s.alloc_bytes, s.free_bytes,
                      json.dumps(s.alloc_count), s.oldest_age_s, s.newest_age_s,
                      json.dumps(list(s.histogram)), json.dumps(list(s.frames)), s.where)
                     for s in r.sites])
                c.executemany(
                    "INSERT OR REPLACE INTO sites (pid, start_time, site, where_, frame) "
                    "VALUES (?,?,?,?,?)",
                    [_site_row(*key, s.site, _exit_site_frame(s) or s.where)
                     for s in r.sites if s.where])
                if r.stats is not None:
                    c.execute("INSERT OR REPLACE INTO exit_stats (pid, start_time, stats) "
                              "VALUES (?,?,?)", (*key, json.dumps(r.stats)))
        except ROW_ERRORS as e:
            if isinstance(e, sqlite3.ProgrammingError) and "closed" in str(e):
                raise describe(e, self.path, "cannot write to the database") from None
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

    def add_alert(self, a: AlertRow) -> bool:
        """Adds the alert unless the process already has a standing one of
        this verdict (not resolved). True if it was added."""
        try:
            with self.db.atomic():
                c = self.db.conn
                row = c.execute(
                    "SELECT 1 FROM alerts WHERE pid = ? AND start_time = ? AND verdict = ? "
                    "AND resolved IS NULL", (a.pid, a.start_time, a.verdict)).fetchone()
                if row is not None:
                    return False
                c.execute(
                    "INSERT INTO alerts (pid, start_time, time, wall_time, comm, verdict, slope,"
                    " slope_low, slope_high, confidence, growth, site, message, kind, evidence)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (a.pid, a.start_time, a.time, a.wall_time, a.comm, a.verdict, a.slope,
                     a.slope_low, a.slope_high, a.confidence, a.growth, a.site, a.message,
                     a.kind, None if a.evidence is None else json.dumps(a.evidence)))
                return True
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

    def resolve_alerts(self, pid: int, start_time: int, time_ns: int, wall: float,
                       verdict: str = "LEAK") -> int:
        """Marks the process's standing alerts of `verdict` resolved at
        time_ns (wall: Unix seconds); the number marked."""
        try:
            with self.db.atomic():
                return self.db.conn.execute(
                    "UPDATE alerts SET resolved = ?, resolved_wall = ? WHERE pid = ? AND "
                    "start_time = ? AND verdict = ? AND resolved IS NULL",
                    (time_ns, wall, pid, start_time, verdict)).rowcount
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None


    def add_scan(self, r: ScanRow) -> None:
        """Stores a scan and its sites (a scan of the same time again: ignored)."""
        key = (r.pid, r.start_time, r.time)
        try:
            with self.db.atomic():
                c = self.db.conn
                c.execute(
                    "INSERT OR IGNORE INTO scans (pid, start_time, time, wall_time, "
                    "definite_blocks, definite_bytes, indirect_blocks, indirect_bytes, "
                    "unknown_blocks, young_blocks, longest_stop_us, scan_us, error) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (*key, r.wall_time, r.definite_blocks, r.definite_bytes,
                     r.indirect_blocks, r.indirect_bytes, r.unknown_blocks, r.young_blocks,
                     r.longest_stop_us, r.scan_us, r.error))
                c.executemany(
                    "INSERT OR IGNORE INTO scan_sites (pid, start_time, time, site, where_, "
                    "definite_blocks, definite_bytes, indirect_blocks, indirect_bytes) VALUES "
                    "(?,?,?,?,?,?,?,?,?)",
                    [(*key, x.site, x.where, x.definite_blocks, x.definite_bytes,
                      x.indirect_blocks, x.indirect_bytes) for x in r.sites])
        except ROW_ERRORS as e:
            raise BadRowError(f"the database refused a row: {type(e).__name__}: {e}") from None
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot write to the database") from None

