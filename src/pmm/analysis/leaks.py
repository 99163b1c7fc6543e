"""Pure logic of `pmctl leaks`: live blocks grouped by site, with ages.

No I/O here. Input: the live blocks of a pid (PMM_READ_BLOCKS), its sites
(PMM_READ_SITES) and "now" on CLOCK_MONOTONIC (the clock of block.time_ns).

Figures are weighted: a block recorded with sampling weight w stands for w
blocks of its size (the kernel's per-site figures are weighted the same
way). With exact tracking (weight 1) they are exact counts.

The age histogram is dmalloc's: blocks younger than 1 s, 10 s, 100 s,
1000 s, and older.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pmm.kernel.model import Block, Site

if TYPE_CHECKING:
    from pmm.kernel.blockstream import BlockPage
    from pmm.symbolize import Frame

# Upper bounds (seconds, exclusive) of the age buckets; the last is open.
AGE_BOUNDS_S: tuple[float, ...] = (1.0, 10.0, 100.0, 1000.0)
AGE_LABELS: tuple[str, ...] = ("<1s", "<10s", "<100s", "<1000s", "older")


def age_bucket(age_s: float) -> int:
    """Index into AGE_LABELS of a block aged `age_s` seconds."""
    for i, bound in enumerate(AGE_BOUNDS_S):
        if age_s < bound:
            return i
    return len(AGE_BOUNDS_S)


@dataclass(frozen=True)
class LeakGroup:
    """The live blocks of one site."""

    site: int
    blocks: int  # weighted count of live blocks
    bytes: int  # weighted live bytes
    oldest_age_s: float
    newest_age_s: float
    histogram: tuple[int, ...]  # per AGE_LABELS, weighted
    desc: Site | None  # None: the site was never registered

    def to_dict(self, frames: Sequence[Frame], depth: int) -> dict[str, Any]:
        """The JSON form of `pmctl leaks`'s site: its figures, where it is
        (`source` says from what: "shim" the function, file and line the
        program registered; "debuginfo", "symbol", "object" or "address"
        the symbolized first frame; "unknown" nothing) and its first `depth`
        frames, symbolized (`frames`, in the site's order)."""
        d: dict[str, Any] = {
            "site": self.site,
            "blocks": self.blocks,
            "bytes": self.bytes,
            "oldest_age_s": round(self.oldest_age_s, 3),
            "newest_age_s": round(self.newest_age_s, 3),
            "histogram": dict(zip(AGE_LABELS, self.histogram, strict=True)),
        }
        from pmm.symbolize import Frame, first_user_frame

        desc = self.desc
        top = first_user_frame(frames)  # past the allocator's own frames
        if desc is not None and desc.has_source:
            d.update(source="shim", func=desc.func or None, file=desc.file or None,
                     line=desc.line or None, object=top.object if top else None,
                     offset=top.offset if top else None)
            d["where"] = Frame.registered_at(desc.func, desc.file, desc.line).describe()
        elif top is not None:
            source = (
                "debuginfo" if top.line else "symbol" if top.func else
                "object" if top.object else "address"
            )
            d.update(source=source, func=top.func, file=top.file, line=top.line,
                     object=top.object, offset=top.offset, where=top.describe())
        else:
            d.update(source="unknown", func=None, file=None, line=None, object=None,
                     offset=None,
                     where="unknown site" if self.site == 0
                     else f"site {self.site} (not registered)")
        d["frames"] = [f.as_dict() for f in frames[:depth]]
        return d


def block_age_s(block: Block, now_ns: int) -> float:
    """Seconds from the block's allocation to now_ns (on the clock of its
    time_ns); 0 rather than negative."""
    return max(0, now_ns - block.time_ns) / 1e9


def group_blocks(
    blocks: Iterable[Block], sites: Mapping[int, Site], now_ns: int
) -> list[LeakGroup]:
    """Groups live blocks by site; largest live bytes first.

    Ties are broken by block count (more first), then by site id, so the
    order is stable. The blocks are taken a page at a time
    (pmm.kernel.blockstream); `group_pages` takes pages as the device reads them.
    """
    from pmm.kernel.blockstream import pages_of

    return group_pages(pages_of(blocks), sites, now_ns)


def group_pages(
    pages: Iterable[BlockPage], sites: Mapping[int, Site], now_ns: int
) -> list[LeakGroup]:
    """group_blocks of blocks read page by page (pmm.kernel.blockstream.read_pages):
    per site, never per block, is what stays in memory."""
    from pmm.kernel.blockstream import group_pages as fold

    g = fold(pages, now_ns, AGE_BOUNDS_S)
    groups = [
        LeakGroup(site=site, blocks=nb, bytes=nbytes, oldest_age_s=oldest,
                  newest_age_s=newest, histogram=hist, desc=sites.get(site))
        for site, nb, nbytes, oldest, newest, hist in g.sites()
    ]
    groups.sort(key=lambda g: (-g.bytes, -g.blocks, g.site))
    return groups


def total_bytes(groups: Iterable[LeakGroup]) -> int:
    """The live bytes of all the groups."""
    return sum(g.bytes for g in groups)
