"""Reading: processes, samples, sites, alerts, post-mortem records and
scans; a database of an older pmd lacks some tables and columns, and
reads as having nothing in them."""

from __future__ import annotations

import json
import re
import sqlite3
from array import array
from typing import TYPE_CHECKING, Any

from pmm.store.connection import Connection
from pmm.store.errors import describe
from pmm.store.rows import (
    AlertRow,
    ExitSiteRow,
    ProcessRow,
    SampleRow,
    ScanRow,
    ScanSiteRow,
    Series,
)
from pmm.store.schema import SAMPLE_HEAP_COLUMNS

if TYPE_CHECKING:  # the symbolizer's modules load only when frames are read
    from pmm.symbolize import Frame

# the shapes of Frame.describe's text, as an older pmd stored a site's
# description (only text): 'leak() leak.c:30', 'malloc() (libc.so.6+0x9a1ca)',
# 'libfoo.so+0x1139 (leak_in_lib+0x19)', 'libc.so.6+0x2a1ca', '0x7f00'
_SOURCE_LINE = re.compile(r"(?P<func>.+) (?P<file>[^ ]+):(?P<line>\d+)")
_IN_OBJECT = re.compile(r"(?P<func>.+) \((?P<object>[^ ]+)\+0x(?P<offset>[0-9a-f]+)\)")
_OBJECT = re.compile(r"(?P<object>[^ ]+)\+0x(?P<offset>[0-9a-f]+)( \((?P<symbol>.+)\))?")
_ADDRESS = re.compile(r"0x(?P<addr>[0-9a-f]+)")


def _json_dict(text: str | None) -> dict[str, Any] | None:
    """A stored JSON object (None for NULL or what is not one)."""
    if not text:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None



def _frame_of_text(where: str) -> Frame:
    """The fields of a description an older pmd stored as text only: the
    Frame whose `describe` gives that very text (the one place that parses a
    description; a text of no known shape is kept whole)."""
    from pmm.symbolize import Frame

    tried: list[Frame] = []
    if m := _SOURCE_LINE.fullmatch(where):
        func, file, line = m["func"], m["file"], int(m["line"])
        plain = func[:-2] if func.endswith("()") else func
        tried += [Frame(0, func=plain, file=file, line=line),
                  Frame.registered_at(None if plain == "?" else plain, file, line)]
    if m := _IN_OBJECT.fullmatch(where):
        func = m["func"][:-2] if m["func"].endswith("()") else m["func"]
        tried.append(Frame(0, object=m["object"], offset=int(m["offset"], 16), func=func))
    if m := _OBJECT.fullmatch(where):
        tried.append(Frame(0, object=m["object"], offset=int(m["offset"], 16),
                           symbol=m["symbol"]))
    if m := _ADDRESS.fullmatch(where):
        tried.append(Frame(int(m["addr"], 16)))
    if where == "?":
        tried.append(Frame(0))
    return next((f for f in tried if f.describe() == where), Frame(0, symbol=where))


class Reading(Connection):
    """Store's reading methods."""

    def scans(self, pid: int, start_time: int | None = None) -> list[ScanRow]:
        """The scans of pid (of its run start_time, if given), oldest first,
        each with its sites worst first; none in a database without them."""
        if not self._has_table("scans"):
            return []
        where, args = ("pid = ?", [pid]) if start_time is None else \
            ("pid = ? AND start_time = ?", [pid, start_time])
        out = []
        for r in self._query(
                "SELECT pid, start_time, time, wall_time, definite_blocks, definite_bytes, "
                "indirect_blocks, indirect_bytes, unknown_blocks, young_blocks, "
                f"longest_stop_us, scan_us, error FROM scans WHERE {where} ORDER BY time",
                args):
            sites = tuple(ScanSiteRow(int(x[0]), str(x[1] or ""), int(x[2] or 0),
                                      int(x[3] or 0), int(x[4] or 0), int(x[5] or 0))
                          for x in self._query(
                "SELECT site, where_, definite_blocks, definite_bytes, indirect_blocks, "
                "indirect_bytes FROM scan_sites WHERE pid = ? AND start_time = ? AND time = ? "
                "ORDER BY definite_bytes DESC, indirect_bytes DESC, site", r[:3]))
            n = [int(v or 0) for v in r[4:12]]
            out.append(ScanRow(int(r[0]), int(r[1]), int(r[2]), float(r[3] or 0),
                               definite_blocks=n[0], definite_bytes=n[1], indirect_blocks=n[2],
                               indirect_bytes=n[3], unknown_blocks=n[4], young_blocks=n[5],
                               longest_stop_us=n[6], scan_us=n[7], error=r[12], sites=sites))
        return out

    def processes(self, pid: int | None = None) -> list[ProcessRow]:
        """Processes (of one pid, if given), latest start first."""
        where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
        rows = self._query(
            "SELECT pid, start_time, comm, exe, cmdline, started, exited, source FROM "
            f"processes {where} ORDER BY start_time DESC, pid", args)
        return [ProcessRow(r[0], r[1], r[2] or "", r[3] or "", r[4] or "", r[5] or 0, r[6],
                           r[7] or "") for r in rows]

    def sample_count(self, pid: int | None = None, start_time: int | None = None) -> int:
        """The number of samples stored: in all, or of the process (pid,
        start_time) when pid is given."""
        if pid is None:
            return int(self._query("SELECT count(*) FROM samples")[0][0])
        return int(self._query(
            "SELECT count(*) FROM samples WHERE pid = ? AND start_time = ?",
            (pid, start_time))[0][0])

    def series(self, pid: int, start_time: int, since_ns: int | None = None) -> Series:
        """The process's samples (time, vm, rss), oldest first, those from since_ns
        on when given; StoreError when the database cannot be read."""
        sql = "SELECT time, vm, rss FROM samples WHERE pid = ? AND start_time = ?"
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        try:
            cur = self.db.conn.execute(sql + " ORDER BY time", args)
            rows = cur.fetchall()
        except sqlite3.Error as e:
            raise describe(e, self.path, "cannot read the database") from None
        return Series(array("q", [r[0] for r in rows]), array("q", [r[1] for r in rows]),
                      array("q", [r[2] for r in rows]))

    def sample_rows(self, pid: int, start_time: int,
                    since_ns: int | None = None) -> list[SampleRow]:
        """The process's samples with every figure, oldest first (those from
        since_ns on, if given); a database of an older pmd has no heap or
        cgroup figures: None."""
        have = self._columns("samples")
        cols = ["pid", "start_time", "time", "vm", "rss", "rss_anon", "rss_file", "rss_shmem",
                "live_bytes", "live_blocks", "source"]
        cols += [c if c in have else f"NULL AS {c}" for c in SAMPLE_HEAP_COLUMNS]
        sql = f"SELECT {', '.join(cols)} FROM samples WHERE pid = ? AND start_time = ?"
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        return [SampleRow(*r) for r in self._query(sql + " ORDER BY time", args)]

    def latest_sample(self, pid: int, start_time: int) -> int | None:
        """The time of the process's latest sample (None: it has none)."""
        r = self._query("SELECT max(time) FROM samples WHERE pid = ? AND start_time = ?",
                        (pid, start_time))
        return int(r[0][0]) if r and r[0][0] is not None else None

    def site_snapshots(self, pid: int, start_time: int,
                       since_ns: int | None = None) -> list[tuple[int, int, int, int]]:
        """(site, time, live_bytes, live_blocks), oldest first."""
        sql = ("SELECT site, time, live_bytes, live_blocks FROM site_snapshots "
               "WHERE pid = ? AND start_time = ?")
        args: list[int] = [pid, start_time]
        if since_ns is not None:
            sql += " AND time >= ?"
            args.append(since_ns)
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]))
                for r in self._query(sql + " ORDER BY time, site", args)]

    def sites(self, pid: int, start_time: int) -> dict[int, str]:
        """The stored descriptions of the process's sites, by site id."""
        return {int(r[0]): str(r[1]) for r in self._query(
            "SELECT site, where_ FROM sites WHERE pid = ? AND start_time = ?",
            (pid, start_time))}

    def site_frames(self, pid: int, start_time: int) -> dict[int, Frame]:
        """The frames that describe the process's sites, by site id: their
        stored fields, or, in rows of an older pmd, the fields of the stored
        text (its `describe` is that text)."""
        from pmm.symbolize import Frame

        frame = "frame" if "frame" in self._columns("sites") else "NULL"
        out = {}
        for site, where, fields in self._query(
                f"SELECT site, where_, {frame} FROM sites WHERE pid = ? AND start_time = ?",
                (pid, start_time)):
            if fields:
                out[int(site)] = Frame.from_dict(json.loads(fields))
            elif where:
                out[int(site)] = _frame_of_text(str(where))
        return out

    def alerts(self, pid: int | None = None) -> list[AlertRow]:
        """The alerts stored (of one pid, if given), oldest first; standing
        ones (resolved None) in a database older than the resolved columns."""
        where, args = ("WHERE pid = ?", (pid,)) if pid is not None else ("", ())
        have = self._columns("alerts")
        resolved = "resolved, resolved_wall" if "resolved" in have else "NULL, NULL"
        kinds = "kind, evidence" if {"kind", "evidence"} <= have else "NULL, NULL"
        rows = self._query(
            "SELECT pid, start_time, time, wall_time, comm, verdict, slope, slope_low, "
            f"slope_high, confidence, growth, site, message, {resolved}, {kinds} FROM alerts "
            f"{where} ORDER BY id", args)
        return [AlertRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10],
                         r[11], r[12], resolved=r[13], resolved_wall=r[14], kind=r[15],
                         evidence=_json_dict(r[16])) for r in rows]

    def harvested(self, pid: int, start_time: int) -> bool:
        """Whether what is kept of the exited process (pid, start_time) is stored."""
        return self._has_table("exit_info") and bool(self._query(
            "SELECT 1 FROM exit_info WHERE pid = ? AND start_time = ?", (pid, start_time)))

    def exit_info(self, pid: int) -> tuple[int, dict[str, Any]] | None:
        """The latest stored record of an exited process with this pid:
        (start_time, its entry) where the entry is PidInfo.to_dict as
        harvested with "harvested" (CLOCK_BOOTTIME ns) and "objects"
        (ObjectFile.to_dict each); None when there is none."""
        if not self._has_table("exit_info"):
            return None
        rows = self._query(
            "SELECT start_time, harvested, info, objects FROM exit_info WHERE pid = ? "
            "ORDER BY start_time DESC LIMIT 1", (pid,))
        if not rows:
            return None
        start, harvested, info, objects = rows[0]
        d: dict[str, Any] = json.loads(info)
        d["harvested"] = harvested
        d["objects"] = json.loads(objects) if objects else []
        return int(start), d

    def exit_sites(self, pid: int, start_time: int) -> list[ExitSiteRow]:
        """The stored sites of the exited process (pid, start_time), by site id."""
        if not self._has_table("exit_sites"):
            return []
        rows = self._query(
            "SELECT site, registered, flags, func, file, line, live_bytes, live_blocks, "
            "alloc_bytes, free_bytes, alloc_count, oldest_age_s, newest_age_s, histogram, "
            "frames, where_ FROM exit_sites WHERE pid = ? AND start_time = ? ORDER BY site",
            (pid, start_time))
        return [ExitSiteRow(
            site=int(r[0]), registered=bool(r[1]), flags=r[2] or 0, func=r[3] or "",
            file=r[4] or "", line=r[5] or 0, live_bytes=r[6] or 0, live_blocks=r[7] or 0,
            alloc_bytes=r[8] or 0, free_bytes=r[9] or 0,
            alloc_count=json.loads(r[10]) if r[10] else {}, oldest_age_s=r[11],
            newest_age_s=r[12], histogram=tuple(json.loads(r[13])) if r[13] else (),
            frames=tuple(json.loads(r[14])) if r[14] else (), where=r[15] or "")
            for r in rows]

    def exit_stats(self, pid: int, start_time: int) -> dict[str, Any] | None:
        """The stored statistics of the exited process (pid, start_time), as
        StatsInfo.to_dict gave them; None when there are none."""
        if not self._has_table("exit_stats"):
            return None
        rows = self._query("SELECT stats FROM exit_stats WHERE pid = ? AND start_time = ?",
                           (pid, start_time))
        return json.loads(rows[0][0]) if rows else None
