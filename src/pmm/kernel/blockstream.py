"""A process's live blocks as a stream of pages, never all at once.

In exact mode the module holds every live block of a process: ten million
of them is a normal day for a large server. A `Block` dataclass costs about
200 bytes in Python and a microsecond to make, so a list of them all would
cost 2 GB and ten seconds before any work is done. Instead the read-back
ioctl's pages (pmm.kernel.device.Device.block_pages: up to uapi.MAX_READ blocks a
call) become `BlockPage`s, one list per field, made by C code (memoryview
slices) without a Python object per block, and each consumer folds a page
into what it keeps and drops it:

- `SiteGrouper`: per site, the weighted blocks and bytes, the oldest and
  newest block and the age histogram (pmm.analysis.leaks.group_blocks's figures,
  exactly); memory is per site, not per block. `pmctl leaks`, the pprof
  endpoint, the HTML report and pmd's harvest at a process's exit use it.
- `BlockSorter`: the blocks oldest first (`pmctl logs`), in runs of
  `SORT_RUN` blocks sorted in memory and, past the first run, written to an
  unnamed temporary file (42 bytes a block) and merged at the end: memory
  stays bounded whatever the count. `--limit N` keeps only the oldest N of
  each run, and when N is small no run is written at all.

Pure library; no I/O but the sorter's temporary file.
"""

from __future__ import annotations

import heapq
import tempfile
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import IO, Literal, Protocol

from pmm.kernel.model import Block

PAGE = 4096  # blocks per page made from a list (pmm.kernel.uapi.MAX_READ)
SORT_RUN = 131072  # blocks sorted in memory at a time by BlockSorter (~25 MB)
MERGE_PAGE = 1024  # blocks read back at a time from each written run

# one block as the sorter hands it out: (time_ns, ptr, prev_ptr, size, site,
# weight, op), oldest first
Row = tuple[int, int, int, int, int, int, int]


@dataclass(frozen=True)
class BlockPage:
    """Some live blocks of a process, one list per struct pmm_block field
    (the i-th block is ptr[i], prev_ptr[i], ...)."""

    ptr: list[int]
    prev_ptr: list[int]
    size: list[int]
    time_ns: list[int]
    site: list[int]
    weight: list[int]
    op: list[int]

    def __len__(self) -> int:
        return len(self.ptr)

    @classmethod
    def from_blocks(cls, blocks: Iterable[Block]) -> BlockPage:
        """The page of these blocks (tests, and readers that give lists)."""
        bl = list(blocks)
        return cls([b.ptr for b in bl], [b.prev_ptr for b in bl], [b.size for b in bl],
                   [b.time_ns for b in bl], [b.site for b in bl], [b.weight for b in bl],
                   [b.op for b in bl])

    @classmethod
    def from_raw(cls, raw: bytes | bytearray | memoryview, n: int,
                 offsets: Mapping[str, int], esize: int) -> BlockPage:
        """The page of n packed C structs of esize bytes each, whose fields
        start at these byte offsets (u64 ptr, prev_ptr, size, time_ns; u32
        site, weight; u16 op; native byte order)."""
        mv = memoryview(raw)[:n * esize]

        def col(fmt: Literal["Q", "I", "H"], width: int, name: str) -> list[int]:
            off = offsets[name]
            if off % width or esize % width:
                raise ValueError(f"field {name} is not aligned to {width} bytes")
            view = mv.cast(fmt)[off // width::esize // width]
            out: list[int] = view.tolist()
            return out

        return cls(col("Q", 8, "ptr"), col("Q", 8, "prev_ptr"), col("Q", 8, "size"),
                   col("Q", 8, "time_ns"), col("I", 4, "site"), col("I", 4, "weight"),
                   col("H", 2, "op"))

    def blocks(self) -> Iterator[Block]:
        """The page's blocks as pmm.kernel.model.Block."""
        for p, pp, sz, t, s, w, op in zip(self.ptr, self.prev_ptr, self.size, self.time_ns,
                                          self.site, self.weight, self.op, strict=True):
            yield Block(p, pp, sz, t, s, w, op)


def pages_of(blocks: Iterable[Block], page: int = PAGE) -> Iterator[BlockPage]:
    """Blocks from a list or any iterable, as pages of at most `page`."""
    buf: list[Block] = []
    for b in blocks:
        buf.append(b)
        if len(buf) >= page:
            yield BlockPage.from_blocks(buf)
            buf = []
    if buf:
        yield BlockPage.from_blocks(buf)


class BlockReader(Protocol):
    """What reads a process's blocks: pmm.kernel.device.Device, a snapshot, a test's fake."""

    def blocks(self, pid: int) -> list[Block]:
        """The pid's live blocks."""


def read_pages(reader: BlockReader, pid: int) -> Iterator[BlockPage]:
    """The pid's live blocks page by page: the reader's `block_pages` when it
    has one (pmm.kernel.device.Device), else its `blocks` list cut into pages."""
    paged: Callable[[int], Iterable[BlockPage]] | None = getattr(reader, "block_pages", None)
    if paged is not None:
        return iter(paged(pid))
    return pages_of(reader.blocks(pid))


# -- per site --------------------------------------------------------------------


def age_cuts(bounds_s: Iterable[float]) -> tuple[int, ...]:
    """Per bound, the fewest nanoseconds whose age in seconds (ns / 1e9, as
    pmm.analysis.leaks.block_age_s computes it) is not below it: a block is at least
    that old exactly when now - time_ns >= the cut."""
    cuts = []
    for bound in bounds_s:
        c = max(0, int(bound * 1e9))
        while c > 0 and (c - 1) / 1e9 >= bound:
            c -= 1
        while c / 1e9 < bound:
            c += 1
        cuts.append(c)
    return tuple(cuts)


class _Acc:
    """One site's figures so far."""

    __slots__ = ("blocks", "bytes", "hist", "max_t", "min_t")

    def __init__(self, nbuckets: int) -> None:
        self.blocks = 0
        self.bytes = 0
        self.min_t = -1
        self.max_t = -1
        self.hist = [0] * nbuckets


class SiteGrouper:
    """Live blocks folded per site as pages arrive (see the module's
    docstring). `now_ns` is on the blocks' clock (CLOCK_MONOTONIC); the
    ages and the histogram are those pmm.analysis.leaks.group_blocks computes, to the
    bit: a block's age is max(0, now_ns - time_ns) / 1e9 and its bucket the
    first of bounds_s it is below."""

    def __init__(self, now_ns: int, bounds_s: Iterable[float]) -> None:
        self.now_ns = now_ns
        cuts = age_cuts(bounds_s)
        # a block is in bucket >= i+1 exactly when time_ns <= now_ns - cuts[i]
        # (for a cut of 0 every block is: max(0, ...) >= 0)
        self.limits = tuple(now_ns - c if c > 0 else None for c in cuts)
        self.nbuckets = len(cuts) + 1
        self.acc: dict[int, _Acc] = {}
        self.count = 0  # blocks seen (not weighted)

    def add_page(self, page: BlockPage) -> None:
        """Folds one page in."""
        n = len(page)
        if not n:
            return
        self.count += n
        sites, weights, times, sizes = page.site, page.weight, page.time_ns, page.size
        if min(weights) == max(weights):  # exact mode: all 1
            w = max(1, weights[0])
            if min(sites) == max(sites):
                self._add(sites[0], w, times, sum(sizes))
                return
            keys = sites
        else:
            keys = [s | (max(1, w) << 32) for s, w in zip(sites, weights, strict=True)]
            w = 0
        by_t: dict[int, list[int]] = {}
        by_sz: dict[int, int] = {}
        for k, t, sz in zip(keys, times, sizes, strict=True):
            lst = by_t.get(k)
            if lst is None:
                by_t[k] = [t]
                by_sz[k] = sz
            else:
                lst.append(t)
                by_sz[k] += sz
        for k, ts in by_t.items():
            if w:
                self._add(k, w, ts, by_sz[k])
            else:
                self._add(k & 0xFFFFFFFF, k >> 32, ts, by_sz[k])

    def _add(self, site: int, w: int, times: list[int], size_sum: int) -> None:
        a = self.acc.get(site)
        if a is None:
            a = self.acc[site] = _Acc(self.nbuckets)
        ts = sorted(times)
        n = len(ts)
        a.blocks += n * w
        a.bytes += size_sum * w
        if a.min_t < 0 or ts[0] < a.min_t:
            a.min_t = ts[0]
        if ts[-1] > a.max_t:
            a.max_t = ts[-1]
        hist = a.hist
        prev = n  # blocks at least as old as the previous bound
        for i, lim in enumerate(self.limits):
            older = n if lim is None else bisect_right(ts, lim)  # at least this old
            hist[i] += (prev - older) * w
            prev = older
        hist[-1] += prev * w

    def age_s(self, t: int) -> float:
        """The age of a block allocated at t, as pmm.analysis.leaks.block_age_s gives it."""
        return max(0, self.now_ns - t) / 1e9

    def sites(self) -> Iterator[tuple[int, int, int, float, float, tuple[int, ...]]]:
        """Per site seen: (site, weighted blocks, weighted bytes, oldest age,
        newest age, histogram), in no particular order."""
        for site, a in self.acc.items():
            yield (site, a.blocks, a.bytes, self.age_s(a.min_t), self.age_s(a.max_t),
                   tuple(a.hist))


def group_pages(pages: Iterable[BlockPage], now_ns: int,
                bounds_s: Iterable[float]) -> SiteGrouper:
    """All the pages folded into one SiteGrouper."""
    g = SiteGrouper(now_ns, bounds_s)
    for p in pages:
        g.add_page(p)
    return g


# -- oldest first ----------------------------------------------------------------

_COLS = (("Q", 8), ("Q", 8), ("Q", 8), ("Q", 8), ("I", 4), ("I", 4), ("H", 2))
ROW_BYTES = sum(w for _, w in _COLS)  # 42: what a written block costs


def _take(col: list[int], idx: list[int]) -> list[int]:
    """col's items at these indexes, in their order."""
    if len(idx) == 1:
        return [col[idx[0]]]
    return list(itemgetter(*idx)(col)) if idx else []


class BlockSorter:
    """The blocks of pages oldest first (time, then address), with memory
    bounded by `run` blocks (SORT_RUN) whatever their number (see the module's
    docstring). `since_ns`: only blocks allocated at or after it; `limit`:
    only the oldest `limit` of those (0/None: all). `total` counts every
    block added, selected or not. Iterate once, after the last add_page;
    `close` (or the context manager) removes the temporary file."""

    def __init__(self, since_ns: int | None = None, limit: int | None = None,
                 run: int | None = None, tmpdir: str | None = None) -> None:
        self.since_ns = since_ns
        self.limit = limit or 0
        self.run = max(1, SORT_RUN if run is None else run)
        self.tmpdir = tmpdir
        self.total = 0
        self.cols: list[list[int]] = [[] for _ in _COLS]
        self.file: IO[bytes] | None = None
        self.runs: list[tuple[int, int]] = []  # (offset, blocks) in the file
        self.spilled = 0  # blocks written

    def __enter__(self) -> BlockSorter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Removes the temporary file (if one was needed)."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def add_page(self, page: BlockPage) -> None:
        """Adds one page's blocks."""
        self.total += len(page)
        cols: tuple[list[int], ...] = (page.time_ns, page.ptr, page.prev_ptr, page.size,
                                       page.site, page.weight, page.op)
        if self.since_ns is not None:
            cut = self.since_ns
            keep = [i for i, t in enumerate(page.time_ns) if t >= cut]
            if len(keep) < len(page):
                if not keep:
                    return
                cols = tuple(_take(c, keep) for c in cols)
        for mine, new in zip(self.cols, cols, strict=True):
            mine.extend(new)
        if len(self.cols[0]) >= self.run:
            self._end_run()

    def _sorted(self) -> list[list[int]]:
        """The blocks held, sorted (and cut to the limit); the hold emptied."""
        cols, self.cols = self.cols, [[] for _ in _COLS]
        n = len(cols[0])
        if n <= 1:
            return cols
        t, p = cols[0], cols[1]
        order = sorted(range(n), key=p.__getitem__)
        order.sort(key=t.__getitem__)  # stable: by time, then address
        if self.limit and n > self.limit:
            del order[self.limit:]
        return [_take(c, order) for c in cols]

    def _end_run(self) -> None:
        cols = self._sorted()
        n = len(cols[0])
        if self.limit and n <= self.run // 2:
            self.cols = cols  # the oldest `limit` so far: kept, sorted with the next run
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="pmm-sort.", dir=self.tmpdir)
        off = self.file.seek(0, 2)
        for a in range(0, n, MERGE_PAGE):
            b = min(n, a + MERGE_PAGE)
            for (fmt, _), c in zip(_COLS, cols, strict=True):
                self.file.write(array(fmt, c[a:b]).tobytes())
        self.runs.append((off, n))
        self.spilled += n

    def _read_run(self, off: int, n: int) -> Iterator[Row]:
        f = self.file
        assert f is not None
        pos = off
        for a in range(0, n, MERGE_PAGE):
            m = min(n - a, MERGE_PAGE)
            f.seek(pos)
            raw = f.read(m * ROW_BYTES)
            pos += m * ROW_BYTES
            cols = []
            at = 0
            for fmt, w in _COLS:
                arr = array(fmt)
                arr.frombytes(raw[at:at + m * w])
                at += m * w
                cols.append(arr.tolist())
            yield from zip(*cols, strict=True)

    def __iter__(self) -> Iterator[Row]:
        last = self._sorted()
        if not self.runs:
            yield from zip(*last, strict=True)
            return
        streams: list[Iterator[Row]] = [self._read_run(off, n) for off, n in self.runs]
        if last[0]:
            streams.append(zip(*last, strict=True))
        merged: Iterable[Row] = heapq.merge(*streams)
        if self.limit:
            for i, row in enumerate(merged):
                if i >= self.limit:
                    return
                yield row
        else:
            yield from merged


__all__ = ["PAGE", "SORT_RUN", "BlockPage", "BlockReader", "BlockSorter", "Row",
           "SiteGrouper", "age_cuts", "group_pages", "pages_of", "read_pages"]
