"""Leak detection over memory samples: pure statistics, no I/O.

The method (DESIGN.md decision 12: statistics, not thresholds):

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
NOT ENOUGH DATA (fewer than `min_samples` samples or `min_buckets` buckets).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Verdict(enum.StrEnum):
    LEAK = "LEAK"
    GROWING = "GROWING"
    STABLE = "STABLE"
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

    def __post_init__(self) -> None:
        if self.min_buckets < 4 or self.max_buckets < self.min_buckets:
            raise ValueError("need 4 <= min_buckets <= max_buckets")
        if self.min_samples < self.min_buckets:
            raise ValueError("min_samples must be >= min_buckets")
        if not 0.5 <= self.confidence < 1.0:
            raise ValueError("confidence must be in [0.5, 1)")
        if not 0.0 < self.late_fraction < 1.0:
            raise ValueError("late_fraction must be in (0, 1)")


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
        d = asdict(self)
        d["verdict"] = str(self.verdict)
        d["bucket_times"] = list(self.bucket_times)
        d["bucket_minima"] = list(self.bucket_minima)
        lo_hi = self.rate_kib_min
        d["rate_kib_min"] = lo_hi[0]
        d["rate_kib_min_low"] = lo_hi[1]
        d["rate_kib_min_high"] = lo_hi[2]
        return d


def _as_arrays(times: Iterable[float], values: Iterable[float]) -> tuple[FloatArray, FloatArray]:
    t = np.asarray(list(times) if not isinstance(times, np.ndarray) else times, dtype=np.float64)
    v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError("times and values must be 1-D and of equal length")
    ok = np.isfinite(t) & np.isfinite(v)
    t, v = t[ok], v[ok]
    if t.size > 1 and np.any(np.diff(t) < 0):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    return t, v


_MAD_NORMAL = 1.482602218505602  # 1 / Phi^-1(3/4)


def _robust_sigma(x: FloatArray) -> float:
    """The MAD scaled to a normal sigma (what scipy.stats.median_abs_deviation
    with scale="normal" returns, without its per-call wrapper cost, which
    dominated pmd's detector runs)."""
    if x.size == 0:
        return 0.0
    return float(np.median(np.abs(x - np.median(x))) * _MAD_NORMAL)


def _drop_spacing(t: FloatArray, v: FloatArray, sigmas: float) -> float:
    """Median time between large drops (0 if there are fewer than three).

    The scale of ordinary sample-to-sample changes is the MAD of the
    differences; a sawtooth's collapse or a spike's return is far outside it.
    """
    d = np.diff(v)
    if d.size < 4:
        return 0.0
    scale = _robust_sigma(d)
    if scale <= 0.0:
        # integer-valued data (pages) often has most differences exactly 0
        nz = d[d != 0]
        scale = _robust_sigma(nz) if nz.size >= 4 else 0.0
        if scale <= 0.0:
            return 0.0
    drops = np.flatnonzero(d < -sigmas * scale)
    if drops.size < 3:
        return 0.0
    return float(np.median(np.diff(t[drops + 1])))


def _buckets(
    t: FloatArray, v: FloatArray, params: Params
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Each non-empty equal-time bucket's smallest sample (indices into t)
    and the gap from it to the bucket's second smallest (NaN when alone)."""
    span = float(t[-1] - t[0])
    n = t.size
    k = max(params.min_buckets, min(params.max_buckets, n // params.samples_per_bucket))
    spacing = _drop_spacing(t, v, params.drop_sigmas)
    if spacing > 0.0:
        k = min(k, max(params.min_buckets, int(span / (1.5 * spacing))))
    # a gap in the samples leaves buckets empty: use more, narrower buckets then
    for kk in range(k, max(k, min(params.max_buckets, n // 2)) + 1):
        # bucket index per sample; the last sample belongs to the last bucket
        idx = np.minimum(((t - t[0]) / span * kk).astype(np.int64), kk - 1)
        # sort by (bucket, value): each run's head is its minimum
        order = np.lexsort((v, idx))
        first = np.ones(n, dtype=bool)
        first[1:] = idx[order][1:] != idx[order][:-1]
        heads = np.flatnonzero(first)
        if heads.size >= params.min_buckets:
            break
    pick = order[heads]
    gap = np.full(heads.size, np.nan)
    # the run's second element, when the run has one
    has_second = np.append(heads[1:], n) - heads >= 2
    gap[has_second] = v[order[heads[has_second] + 1]] - v[pick[has_second]]
    return pick, gap


def bucket_minima(
    t: FloatArray, v: FloatArray, params: Params = Params()
) -> tuple[FloatArray, FloatArray]:
    """(times, values) of the minimum of each non-empty equal-time bucket."""
    pick, _ = _buckets(t, v, params)
    return t[pick], v[pick]


def _tie_term(a: FloatArray) -> float:
    """sum of k(k-1)(2k+5) over the groups of k equal values (Sen's ties)."""
    _, k = np.unique(a, return_counts=True)
    k = k[k > 1].astype(np.float64)
    return float(np.sum(k * (k - 1) * (2 * k + 5)))


def theil_sen(x: FloatArray, y: FloatArray, confidence: float = 0.95
              ) -> tuple[float, float, float, float]:
    """(slope, intercept, low, high): the Theil-Sen estimator with Sen's (1968)
    confidence interval, ties counted; what scipy.stats.theilslopes returns
    (method "separate"), without importing scipy (half a second, minutes on
    the VM's 9p), so `pmctl trend` and pmd start fast."""
    dx = x[:, np.newaxis] - x
    dy = y[:, np.newaxis] - y
    pos = dx > 0
    slopes = np.sort(dy[pos] / dx[pos])
    if slopes.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    slope = float(np.median(slopes))
    intercept = float(np.median(y) - slope * np.median(x))
    alpha = 1.0 - confidence if confidence > 0.5 else confidence
    z = NormalDist().inv_cdf(alpha / 2.0)
    ny = y.size
    var = (ny * (ny - 1) * (2 * ny + 5) - _tie_term(x) - _tie_term(y)) / 18.0
    nt = slopes.size
    if var < 0:
        return slope, intercept, math.nan, math.nan
    sigma = math.sqrt(var)
    upper = min(int(np.round((nt - z * sigma) / 2.0)), nt - 1)
    lower = max(int(np.round((nt + z * sigma) / 2.0)) - 1, 0)
    return slope, intercept, float(slopes[lower]), float(slopes[upper])


def detect(
    times: Sequence[float] | FloatArray,
    values: Sequence[float] | FloatArray,
    params: Params = Params(),
) -> Trend:
    """Classifies a memory series. times in seconds (any origin), values in bytes."""
    t, v = _as_arrays(times, values)
    n = int(t.size)
    if n < params.min_samples:
        return Trend(Verdict.NOT_ENOUGH_DATA, f"{n} samples, need {params.min_samples}", n,
                     confidence=params.confidence)
    span = float(t[-1] - t[0])
    if span <= 0.0:
        return Trend(Verdict.NOT_ENOUGH_DATA, "all samples at the same time", n,
                     confidence=params.confidence)
    pick, gaps = _buckets(t, v, params)
    bt, bv = t[pick], v[pick]
    if bt.size < params.min_buckets:
        return Trend(Verdict.NOT_ENOUGH_DATA,
                     f"samples fill {bt.size} time buckets, need {params.min_buckets}", n,
                     span_s=span, buckets=int(bt.size), confidence=params.confidence)
    x = bt - t[0]
    slope, _, low, high = theil_sen(x, bv, params.confidence)
    intercept = float(np.median(bv - slope * x))
    resid = bv - (intercept + slope * x)
    noise = _robust_sigma(resid)
    level = float(np.median(bv))
    growth = slope * span
    # how far a bucket's minimum may sit above the true floor: when samples
    # land on random phases of a sawtooth faster than the sampling, the two
    # smallest of a bucket lie far apart and the minima wander by as much
    known = gaps[~np.isnan(gaps)]
    spread = float(np.median(known)) if known.size else 0.0
    min_growth = max(params.min_growth_bytes, params.min_growth_fraction * abs(level),
                     params.noise_factor * noise, params.spread_factor * spread)
    # the later part gets its own, finer buckets: half the window must not
    # mean half as many points
    cut = t[-1] - params.late_fraction * span
    tl, vl = t[t >= cut], v[t >= cut]
    if tl.size >= 4 and tl[-1] > tl[0]:
        lt, lv = bucket_minima(tl, vl, params)
    else:
        lt, lv = bt[bt >= cut], bv[bt >= cut]
    if lt.size < 3:
        m = max(3, int(math.ceil(bt.size * params.late_fraction)))
        lt, lv = bt[-m:], bv[-m:]
    late_slope, _, late_low, _ = theil_sen(lt - t[0], lv, params.late_confidence)

    common: dict[str, Any] = dict(
        samples=n, span_s=span, buckets=int(bt.size), slope=slope, slope_low=low,
        slope_high=high, intercept=intercept, t0=float(t[0]), growth=growth,
        min_growth=min_growth, noise=noise, late_slope=late_slope, level=level,
        confidence=params.confidence, bucket_times=tuple(bt.tolist()),
        bucket_minima=tuple(bv.tolist()),
    )
    significant = low > 0.0
    large = growth >= min_growth
    continues = late_slope > 0.0 and late_slope >= params.late_ratio * slope
    # a leak's floor never comes back down; an aliased sawtooth's does
    dip = float(-resid.min())
    fell_back = dip > max(params.fallback_fraction * growth, params.noise_factor * noise)
    late_significant = late_low > 0.0
    pct = round(params.confidence * 100)
    if slope <= 0.0 or not large:
        return Trend(Verdict.STABLE, "the floor grows less than the minimum "
                     f"({_kib(growth)} < {_kib(min_growth)})", **common)
    if not continues:
        return Trend(Verdict.STABLE, "growth stopped: the later part of the window is flat",
                     **common)
    if fell_back:
        return Trend(Verdict.STABLE, f"the floor fell back {_kib(dip)} below its fitted line",
                     **common)
    if significant and late_significant:
        return Trend(Verdict.LEAK, f"the floor grows steadily ({pct}% CI above 0, in the "
                     "whole window and in its later part)", **common)
    where = "in the whole window" if not significant else "in the later part"
    return Trend(Verdict.GROWING, f"the floor grows, not yet significant {where}", **common)


def _kib(b: float) -> str:
    return f"{b / 1024:.0f} KiB"


def seconds_until_exhausted(slope: float, available: float) -> float | None:
    """Seconds until `available` bytes are used up at `slope` bytes/s (None: never)."""
    if slope <= 0.0 or available <= 0.0:
        return None
    return available / slope


@dataclass(frozen=True)
class SiteGrowth:
    site: int
    slope: float  # live bytes per second
    first_bytes: int
    last_bytes: int
    last_blocks: int
    snapshots: int

    @property
    def rate_kib_min(self) -> float:
        return self.slope * 60.0 / 1024.0


def site_growth(
    snapshots: Iterable[tuple[int, float, int, int]], limit: int = 5
) -> list[SiteGrowth]:
    """Sites ranked by how fast their live bytes grow (fastest first).

    snapshots: (site, time_s, live_bytes, live_blocks). Each site's rate is
    the Theil-Sen slope of its live bytes over time (two snapshots: the
    difference quotient). Sites that do not grow are left out.
    """
    per: dict[int, list[tuple[float, int, int]]] = {}
    for site, ts, live, blocks in snapshots:
        per.setdefault(int(site), []).append((float(ts), int(live), int(blocks)))
    out: list[SiteGrowth] = []
    for site, rows in per.items():
        rows.sort()
        if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
            continue
        x = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows], dtype=np.float64)
        if len(rows) == 2:
            slope = float((y[1] - y[0]) / (x[1] - x[0]))
        else:
            slope = theil_sen(x, y)[0]
        if slope <= 0.0:
            continue
        out.append(SiteGrowth(site, slope, rows[0][1], rows[-1][1], rows[-1][2], len(rows)))
    out.sort(key=lambda s: (-s.slope, s.site))
    return out[:limit]
