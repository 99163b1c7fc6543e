"""Leak detection over memory samples: pure statistics, no I/O.

The method (statistics, not thresholds):

1. Bucket minima. The window is cut into equal-time buckets and each bucket
   keeps its smallest value (and that sample's time). A leak raises the floor
   a process never goes below; transient spikes, allocation bursts and the
   peaks of a garbage-collection sawtooth sit above the floor and vanish. The
   bucket is made at least 1.5 times as wide as the typical spacing between
   large drops (a sawtooth's period, a spike's return), so each bucket holds a
   trough; otherwise buckets hold about `samples_per_bucket` samples, between
   `min_buckets` and `max_buckets` of them.
2. Robust slope. Theil-Sen (as scipy.stats.theilslopes) over the bucket minima,
   with its confidence interval (default 95 %). Significant: the lower bound
   is above zero.
3. Minimum total growth. slope x window must reach `min_growth_bytes` and
   `min_growth_fraction` of the floor level, and must stand out of the floor's
   own scatter around the fitted line (`noise_factor` x the normal-consistent
   MAD of the residuals). A step or a warm-up fits a line badly: its
   residuals are large and this test fails. It must also reach
   `spread_factor` x the median gap between each bucket's two smallest
   samples: when a sawtooth is far faster than the sampling, samples land on
   random phases, a bucket's minimum misses the floor by up to the whole
   amplitude, and that gap shows it.
4. Growth continues. The later part of the window (its last `late_fraction`
   of time) is bucketed again on its own and gets its own Theil-Sen slope,
   which must be positive and at least `late_ratio` of the overall slope; a
   process whose growth stopped (plateau after warm-up, a single step) is not
   leaking. For LEAK that slope must also be significant at
   `late_confidence` (default 80 %, two-sided).
5. The floor does not fall back. No bucket minimum may lie more than
   `fallback_fraction` of the growth (and `noise_factor` x the scatter)
   below the fitted line: a leak's floor never comes back down.

Verdicts: LEAK (all of the above), GROWING (large growth that continues but
is not yet significant, in the whole window or in its later part), STABLE,
INCONCLUSIVE, NOT ENOUGH DATA (fewer than `min_samples` samples or
`min_buckets` buckets).

STABLE is evidence, not the absence of it: the confidence interval of the
slope a STABLE rests on (the whole window's; the later part's when growth
stopped or fell back) must lie below the rate that matters
(`rate_that_matters`): the rate that would use up the available memory
(MemAvailable, or the cgroup's room when smaller) within `horizon_s`, kept
between `min_rate` and `max_rate`. When the interval still admits that rate
the verdict is INCONCLUSIVE, with an estimate of how much longer to watch
(`Trend.watch_more_s`).
"""

from __future__ import annotations

import enum
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from itertools import pairwise, repeat
from operator import sub
from statistics import NormalDist, median
from typing import Any, TypeVar

from pmm.units import format_duration, human_bytes, human_rate

_T = TypeVar("_T")

# Plain lists of floats, no numpy: numpy was half of an installation's size,
# and over pmd's window (3600 samples) this takes 2.6 ms a run against its 1.5.


class Verdict(enum.StrEnum):
    """The detector's verdict: LEAK, GROWING (growth not yet significant),
    STABLE, INCONCLUSIVE (no growth shown, none ruled out), or NOT ENOUGH
    DATA."""

    LEAK = "LEAK"
    GROWING = "GROWING"
    STABLE = "STABLE"
    INCONCLUSIVE = "INCONCLUSIVE"
    NOT_ENOUGH_DATA = "NOT ENOUGH DATA"


@dataclass(frozen=True)
class Params:
    """The detector's parameters; the defaults are what pmd and pmctl use."""

    # samples_per_bucket x min_buckets: fewer leave a bucket too few samples
    # to find its floor (an aliased sawtooth then passed for a leak at 20)
    min_samples: int = 30
    samples_per_bucket: int = 5
    min_buckets: int = 6
    max_buckets: int = 30
    confidence: float = 0.95
    min_growth_bytes: float = 64 * 1024
    min_growth_fraction: float = 0.005
    noise_factor: float = 3.0
    # growth must also exceed this many times the median gap between each
    # bucket's two smallest samples (how uncertain a bucket's minimum is)
    spread_factor: float = 3.0
    # not a leak when a bucket's minimum lies this fraction of the window's
    # growth below the fitted floor: the process came back down
    fallback_fraction: float = 0.5
    late_fraction: float = 0.5
    late_ratio: float = 0.5
    late_confidence: float = 0.8
    # a drop is "large" when it exceeds this many robust sigmas of the
    # sample-to-sample differences (bucket sizing only, not a verdict)
    drop_sigmas: float = 4.0
    # STABLE needs the interval below the rate that matters: the rate that
    # uses up the available memory within horizon_s, at most max_rate (90
    # MiB a day is a leak worth knowing of on any machine: the held-out slow
    # leak under spikes grows 120 KiB/min) and at least min_rate (a cgroup
    # with little room left must not need an endless watch)
    horizon_s: float = 30 * 86400.0
    min_rate: float = 16 * 1024 / 60.0  # bytes/s: 16 KiB/min
    max_rate: float = 64 * 1024 / 60.0  # bytes/s: 64 KiB/min
    # what a floor that never moved may hide: the kernel's rss counters move
    # in batches of up to 64 pages a thread (SPLIT_RSS_COUNTING)
    rss_step: float = 64 * 4096.0

    def __post_init__(self) -> None:
        if self.min_buckets < 4 or self.max_buckets < self.min_buckets:
            raise ValueError("need 4 <= min_buckets <= max_buckets")
        if self.min_samples < self.min_buckets:
            raise ValueError("min_samples must be >= min_buckets")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError("confidence must be in [0.5, 1)")
        if not 0.0 < self.late_fraction < 1.0:
            raise ValueError("late_fraction must be in (0, 1)")
        if not 0.0 < self.min_rate <= self.max_rate or self.horizon_s <= 0.0:
            raise ValueError("need 0 < min_rate <= max_rate and horizon_s > 0")


def rate_that_matters(params: Params, available: float | None) -> float:
    """The growth (bytes/s) a STABLE verdict must rule out: the rate that
    would use up `available` bytes within params.horizon_s, kept between
    params.min_rate and params.max_rate: max_rate when available is
    unknown (None, as on a machine with ample memory), min_rate when nothing
    is left."""
    if available is None:
        return params.max_rate
    if available <= 0.0:
        return params.min_rate
    return min(params.max_rate, max(params.min_rate, available / params.horizon_s))


@dataclass(frozen=True)
class Trend:
    """The detector's result. Rates are bytes per second, times seconds."""

    verdict: Verdict
    reason: str
    samples: int
    span_s: float = 0.0
    buckets: int = 0
    slope: float = 0.0
    slope_low: float = 0.0
    slope_high: float = 0.0
    intercept: float = 0.0  # floor at t = t0 (bytes)
    t0: float = 0.0  # time of the first sample (the fit's origin)
    growth: float = 0.0  # slope x span (bytes)
    min_growth: float = 0.0  # what growth had to reach (bytes)
    noise: float = 0.0  # robust scatter of the floor around the fit (bytes)
    late_slope: float = 0.0
    level: float = 0.0  # median floor (bytes)
    confidence: float = 0.95
    matters: float = 0.0  # the rate a STABLE rules out (bytes/s; rate_that_matters)
    watch_more_s: float | None = None  # INCONCLUSIVE: about how much longer to watch
    bucket_times: tuple[float, ...] = field(default=(), repr=False)
    bucket_minima: tuple[float, ...] = field(default=(), repr=False)

    @property
    def rate_kib_min(self) -> tuple[float, float, float]:
        """(slope, low, high) in KiB per minute."""
        k = 60.0 / 1024.0
        return (self.slope * k, self.slope_low * k, self.slope_high * k)

    def fit(self, t: float) -> float:
        """The fitted floor at time t."""
        return self.intercept + self.slope * (t - self.t0)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: every field, and the rates in KiB per minute."""
        d = asdict(self)
        d["verdict"] = str(self.verdict)
        d["bucket_times"] = list(self.bucket_times)
        d["bucket_minima"] = list(self.bucket_minima)
        lo_hi = self.rate_kib_min
        d["rate_kib_min"] = lo_hi[0]
        d["rate_kib_min_low"] = lo_hi[1]
        d["rate_kib_min_high"] = lo_hi[2]
        return d


def _as_lists(times: Iterable[float], values: Iterable[float]) -> tuple[list[float], list[float]]:
    """Finite samples as floats, in time order (stable for equal times)."""
    t = list(map(float, times))
    v = list(map(float, values))
    if len(t) != len(v):
        raise ValueError("times and values must be 1-D and of equal length")
    if not (all(map(math.isfinite, t)) and all(map(math.isfinite, v))):
        kept = [(a, b) for a, b in zip(t, v, strict=True)
                if math.isfinite(a) and math.isfinite(b)]
        t, v = [a for a, _ in kept], [b for _, b in kept]
    if t != sorted(t):
        order = sorted(range(len(t)), key=t.__getitem__)
        t, v = [t[i] for i in order], [v[i] for i in order]
    return t, v


_MAD_NORMAL = 1.482602218505602  # 1 / Phi^-1(3/4)


def _robust_sigma(x: Iterable[float]) -> float:
    """The MAD scaled to a normal sigma (what scipy.stats.median_abs_deviation
    with scale="normal" returns, without its per-call wrapper cost, which
    dominated pmd's detector runs)."""
    xs = x if isinstance(x, list) else list(map(float, x))
    if not xs:
        return 0.0
    mid = median(xs)
    return float(median(map(abs, map(sub, xs, repeat(mid))))) * _MAD_NORMAL


def _drop_spacing(t: list[float], v: list[float], sigmas: float) -> float:
    """Median time between large drops (0 if there are fewer than three).

    The scale of ordinary sample-to-sample changes is the MAD of the
    differences; a sawtooth's collapse or a spike's return is far outside it.
    """
    d = list(map(sub, v[1:], v))
    if len(d) < 4:
        return 0.0
    scale = _robust_sigma(d)
    if scale <= 0.0:
        # integer-valued data (pages) often has most differences exactly 0
        nz = [x for x in d if x != 0]
        scale = _robust_sigma(nz) if len(nz) >= 4 else 0.0
        if scale <= 0.0:
            return 0.0
    limit = -sigmas * scale
    after = [t[i + 1] for i, x in enumerate(d) if x < limit]
    if len(after) < 3:
        return 0.0
    return median([b - a for a, b in pairwise(after)])


def _bucket_starts(t: list[float], count: int) -> list[int]:
    """Where each non-empty one of `count` equal-time buckets starts in t (sorted).

    A sample's bucket is int((x - t0) / span * count), the last sample's
    clipped to count - 1; that scale never decreases as x grows, so bucket b
    starts at the first sample scaled to b or more.
    """
    t0, span = t[0], t[-1] - t[0]

    def scaled(x: float) -> float:
        return (x - t0) / span * count

    edges = {bisect_left(t, float(b), key=scaled) for b in range(1, count)}
    return sorted((edges | {0}) - {len(t)})


def _buckets(t: list[float], v: list[float], params: Params) -> tuple[list[int], list[float]]:
    """Each non-empty equal-time bucket's smallest sample (indices into t, the
    earliest of equal values) and the gap from it to the bucket's second
    smallest (NaN when alone). t is sorted."""
    span = t[-1] - t[0]
    n = len(t)
    k = max(params.min_buckets, min(params.max_buckets, n // params.samples_per_bucket))
    spacing = _drop_spacing(t, v, params.drop_sigmas)
    if spacing > 0.0:
        k = min(k, max(params.min_buckets, int(span / (1.5 * spacing))))
    # a gap in the samples leaves buckets empty: use more, narrower buckets then
    for kk in range(k, max(k, min(params.max_buckets, n // 2)) + 1):
        starts = _bucket_starts(t, kk)
        if len(starts) >= params.min_buckets:
            break
    pick: list[int] = []
    gap: list[float] = []
    for lo, hi in zip(starts, [*starts[1:], n], strict=True):
        seg = v[lo:hi]
        low = min(seg)
        at = seg.index(low)
        pick.append(lo + at)
        rest = seg[:at] + seg[at + 1:]
        gap.append(min(rest) - low if rest else math.nan)
    return pick, gap


def bucket_minima(t: Iterable[float], v: Iterable[float],
                  params: Params = Params()) -> tuple[list[float], list[float]]:
    """(times, values) of the minimum of each non-empty equal-time bucket."""
    ts, vs = _as_lists(t, v)
    pick, _ = _buckets(ts, vs, params)
    return [ts[i] for i in pick], [vs[i] for i in pick]


def _tie_term(a: list[float]) -> float:
    """sum of k(k-1)(2k+5) over the groups of k equal values (Sen's ties)."""
    return float(sum(k * (k - 1) * (2 * k + 5) for k in Counter(a).values() if k > 1))


def theil_sen(x: Iterable[float], y: Iterable[float], confidence: float = 0.95
              ) -> tuple[float, float, float, float]:
    """(slope, intercept, low, high): the Theil-Sen estimator with Sen's (1968)
    confidence interval, ties counted; what scipy.stats.theilslopes returns
    (method "separate"), without importing scipy (half a second, minutes on
    the VM's 9p), so `pmctl trend` and pmd start fast. Quadratic in the
    points: the detector gives it bucket minima (at most 30 by default)."""
    xs = [float(a) for a in x]
    ys = [float(a) for a in y]
    n = len(ys)
    slopes = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i]) if xs[j] > xs[i] else (ys[i] - ys[j]) / (xs[i] - xs[j])
        for i in range(n) for j in range(i + 1, n) if xs[j] != xs[i])
    if not slopes:
        return math.nan, math.nan, math.nan, math.nan
    slope = median(slopes)
    intercept = median(ys) - slope * median(xs)
    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = NormalDist().inv_cdf(alpha / 2.0)
    var = (n * (n - 1) * (2 * n + 5) - _tie_term(xs) - _tie_term(ys)) / 18.0
    nt = len(slopes)
    if var < 0:
        return slope, intercept, math.nan, math.nan
    sigma = math.sqrt(var)
    upper = min(round((nt - z * sigma) / 2.0), nt - 1)
    lower = max(round((nt + z * sigma) / 2.0) - 1, 0)
    return slope, intercept, slopes[lower], slopes[upper]


def _more_samples_s(t: list[float], need: int) -> float | None:
    """Seconds until `need` samples at the spacing seen so far (None: no spacing)."""
    if len(t) < 2 or t[-1] <= t[0]:
        return None
    return max(0, need - len(t)) * (t[-1] - t[0]) / (len(t) - 1)


def watch_longer(span: float, slope: float, high: float, matters: float) -> float:
    """Seconds more to watch until a slope's interval, now reaching `high`,
    would exclude either 0 (a leak) or `matters` (stable), its centre kept."""
    width = high - slope
    need = max(slope, matters - slope)  # the half-width that decides one way
    if width <= need or span <= 0.0:
        return 0.0
    # the slope's error is sigma / (T sqrt(k)) over k bucket minima: T^-3/2 while k grows
    # with T, T^-1 once it reaches max_buckets; T^-1 gives the longer, safer watch
    return span * (width / need - 1.0)


def detect(times: Iterable[float], values: Iterable[float], params: Params = Params(),
           available: float | None = None) -> Trend:
    """Classifies a memory series. times in seconds (any origin), values in
    bytes; available: the bytes the process may still take (MemAvailable, or
    its cgroup's room), None when unknown (see rate_that_matters)."""
    t, v = _as_lists(times, values)
    n = len(t)
    matters = rate_that_matters(params, available)
    if n < params.min_samples:
        return Trend(Verdict.NOT_ENOUGH_DATA, f"{n} samples, need {params.min_samples}", n,
                     span_s=t[-1] - t[0] if t else 0.0, confidence=params.confidence,
                     matters=matters, watch_more_s=_more_samples_s(t, params.min_samples))
    t0 = t[0]
    span = t[-1] - t0
    if span <= 0.0:
        return Trend(Verdict.NOT_ENOUGH_DATA, "all samples at the same time", n,
                     confidence=params.confidence, matters=matters)
    pick, gaps = _buckets(t, v, params)
    bt, bv = [t[i] for i in pick], [v[i] for i in pick]
    if len(bt) < params.min_buckets:
        return Trend(Verdict.NOT_ENOUGH_DATA,
                     f"samples fill {len(bt)} time buckets, need {params.min_buckets}", n,
                     span_s=span, buckets=len(bt), confidence=params.confidence,
                     matters=matters)
    x = [a - t0 for a in bt]
    slope, _, low, high = theil_sen(x, bv, params.confidence)
    intercept = median([b - slope * a for a, b in zip(x, bv, strict=True)])
    resid = [b - (intercept + slope * a) for a, b in zip(x, bv, strict=True)]
    noise = _robust_sigma(resid)
    level = median(bv)
    growth = slope * span
    # how far a bucket's minimum may sit above the true floor: when samples
    # land on random phases of a sawtooth faster than the sampling, the two
    # smallest of a bucket lie far apart and the minima wander by as much
    known = [g for g in gaps if not math.isnan(g)]
    spread = median(known) if known else 0.0
    min_growth = max(params.min_growth_bytes, params.min_growth_fraction * abs(level),
                     params.noise_factor * noise, params.spread_factor * spread)
    # the later part gets its own, finer buckets: half the window must not
    # mean half as many points
    cut = t[-1] - params.late_fraction * span
    at = bisect_left(t, cut)
    tl, vl = t[at:], v[at:]
    if len(tl) >= 4 and tl[-1] > tl[0]:
        late_pick, _ = _buckets(tl, vl, params)
        lt, lv = [tl[i] for i in late_pick], [vl[i] for i in late_pick]
    else:
        lt = [a for a in bt if a >= cut]
        lv = [b for a, b in zip(bt, bv, strict=True) if a >= cut]
    if len(lt) < 3:
        m = max(3, int(math.ceil(len(bt) * params.late_fraction)))
        lt, lv = bt[-m:], bv[-m:]
    lx = [a - t0 for a in lt]
    late_slope, _, late_low, _ = theil_sen(lx, lv, params.late_confidence)

    common: dict[str, Any] = dict(
        samples=n, span_s=span, buckets=len(bt), slope=slope, slope_low=low,
        slope_high=high, intercept=intercept, t0=t0, growth=growth,
        min_growth=min_growth, noise=noise, late_slope=late_slope, level=level,
        confidence=params.confidence, bucket_times=tuple(bt), bucket_minima=tuple(bv),
        matters=matters,
    )
    significant = low > 0.0
    large = growth >= min_growth
    continues = late_slope > 0.0 and late_slope >= params.late_ratio * slope
    # a leak's floor never comes back down; an aliased sawtooth's does
    dip = -min(resid)
    fell_back = dip > max(params.fallback_fraction * growth, params.noise_factor * noise)
    late_significant = late_low > 0.0
    pct = round(params.confidence * 100)

    late: list[float] = []
    # a floor that stays flat rules out only the rates that would have moved it
    # by one step of the series' resolution (rss moves by pages, or by the
    # kernel's batches of up to 64 pages a thread): an interval's upper end is
    # at least a step over its span; the smallest move seen, else rss_step
    step = min((abs(b - a) for a, b in pairwise(v) if b != a), default=params.rss_step)

    def stable(why: str) -> Trend:
        # STABLE only when an interval rules out every rate that matters: the
        # whole window's, else its later part's (the growth now)
        if max(high, step / span) < matters:
            return Trend(Verdict.STABLE, why, **common)
        if not late:
            late.extend(theil_sen(lx, lv, params.confidence))
        late_span = (lt[-1] - lt[0]) if len(lt) > 1 else 0.0
        late_hi = max(late[3], step / late_span if late_span > 0 else math.inf)
        if late_hi < matters:
            return Trend(Verdict.STABLE, why, **common)
        high_now = max(high, step / span)
        more = watch_longer(span, slope, high, matters)
        if step / span >= matters:  # and long enough for a step to show
            more = max(more, step / matters * 1.01 - span)
        if slope > 0.0:  # and LEAK needs the growth to reach its minimum
            more = max(more, min_growth / slope - span)
        return Trend(Verdict.INCONCLUSIVE,
                     f"{why}, but the {pct}% CI reaches {human_rate(high_now * 60)} (its later "
                     f"part {human_rate(late_hi * 60)}), above the {human_rate(matters * 60)} "
                     "that matters (it would use up the memory available within "
                     f"{format_duration(params.horizon_s)})", watch_more_s=more, **common)

    if slope <= 0.0 or not large:
        return stable("the floor grows less than the minimum "
                      f"({human_bytes(growth)} < {human_bytes(min_growth)})")
    if not continues:
        return stable("growth stopped: the later part of the window is flat")
    if fell_back:
        return stable(f"the floor fell back {human_bytes(dip)} below its fitted line")
    if significant and late_significant:
        return Trend(Verdict.LEAK, f"the floor grows steadily ({pct}% CI above 0, in the "
                     "whole window and in its later part)", **common)
    where = "in the whole window" if not significant else "in the later part"
    return Trend(Verdict.GROWING, f"the floor grows, not yet significant {where}", **common)


def seconds_until_exhausted(slope: float, available: float) -> float | None:
    """Seconds until `available` bytes are used up at `slope` bytes/s (None: never)."""
    if slope <= 0.0 or available <= 0.0:
        return None
    return available / slope


@dataclass(frozen=True)
class SiteGrowth:
    """How fast one site's live bytes grow: the slope (bytes/s), its first and
    last live bytes, its last live blocks, and its number of snapshots."""

    site: int
    slope: float  # live bytes per second
    first_bytes: int
    last_bytes: int
    last_blocks: int
    snapshots: int

    @property
    def rate_kib_min(self) -> float:
        """The slope in KiB per minute."""
        return self.slope * 60.0 / 1024.0


# Theil-Sen is quadratic: a site snapshotted every 10 s for a day has 8,640
# snapshots, 37 million pairs; this many evenly spaced ones give its rate.
SITE_GROWTH_POINTS = 200


def _evenly(rows: list[_T], most: int) -> list[_T]:
    """At most `most` of rows, evenly spaced by position, first and last kept."""
    n = len(rows)
    if n <= most:
        return rows
    return [rows[round(i * (n - 1) / (most - 1))] for i in range(most)]


def site_growth(
    snapshots: Iterable[tuple[int, float, int, int]], limit: int = 5
) -> list[SiteGrowth]:
    """Sites ranked by how fast their live bytes grow (fastest first).

    snapshots: (site, time_s, live_bytes, live_blocks). Each site's rate is
    the Theil-Sen slope of its live bytes over time (two snapshots: the
    difference quotient; more than SITE_GROWTH_POINTS: that many of them,
    evenly spaced). Sites that do not grow are left out.
    """
    per: dict[int, list[tuple[float, int, int]]] = {}
    for site, ts, live, blocks in snapshots:
        per.setdefault(int(site), []).append((float(ts), int(live), int(blocks)))
    out: list[SiteGrowth] = []
    for site, rows in per.items():
        rows.sort()
        if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
            continue
        if len(rows) == 2:
            slope = (rows[1][1] - rows[0][1]) / (rows[1][0] - rows[0][0])
        else:
            fit = _evenly(rows, SITE_GROWTH_POINTS)
            slope = theil_sen([r[0] for r in fit], [r[1] for r in fit])[0]
        if slope <= 0.0:
            continue
        out.append(SiteGrowth(site, slope, rows[0][1], rows[-1][1], rows[-1][2], len(rows)))
    out.sort(key=lambda s: (-s.slope, s.site))
    return out[:limit]
