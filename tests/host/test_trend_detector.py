"""The leak detector (src/pmm/analysis/trend.py) over synthetic series: each shape gets
the right verdict for several seeds, leaks get their rate right."""

from __future__ import annotations

import collections
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trend_series as S
from trend_series import KIB, MIB

from pmm.analysis.trend import (
    Params,
    Verdict,
    bucket_minima,
    detect,
    rate_that_matters,
    seconds_until_exhausted,
    site_growth,
    theil_sen,
    watch_longer,
)

SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_flat_noise_is_stable(seed: int) -> None:
    assert detect(*S.flat(seed)).verdict is Verdict.STABLE


def test_stable_reason_in_binary_units() -> None:
    """The reason's sizes read as the rest of the report does (pmm.units), not
    '(0 KiB < 64 KiB)'; the fields keep the exact numbers."""
    t = np.arange(300.0)
    r = detect(t, np.full(300, 5e6))
    assert (r.verdict, r.reason) == (Verdict.STABLE,
                                     "the floor grows less than the minimum (0 B < 64.0 KiB)")
    assert (r.growth, r.min_growth) == (0.0, 64 * KIB)
    t = np.arange(60.0)
    r = detect(t, 5e6 + t * 512)  # 30 KiB over 59 s, under the 64 KiB minimum
    assert r.reason.startswith("the floor grows less than the minimum (29.5 KiB < 64.0 KiB)")
    assert r.growth == pytest.approx(512 * 59)


@pytest.mark.parametrize("seed", SEEDS)
def test_steady_leak(seed: int) -> None:
    r = detect(*S.leak(seed, rate=4 * KIB))
    assert r.verdict is Verdict.LEAK
    assert r.slope == pytest.approx(4 * KIB, rel=0.15)
    assert r.slope_low < r.slope < r.slope_high
    assert r.slope_low <= 4 * KIB * 1.15 and r.slope_high >= 4 * KIB * 0.85
    assert r.rate_kib_min[0] == pytest.approx(240, rel=0.15)


@pytest.mark.parametrize("seed", SEEDS)
def test_slow_leak_under_big_spikes(seed: int) -> None:
    t, v = S.leak_spikes(seed, rate=2 * KIB)
    # the spikes dwarf the leak: 1.2 MiB of growth under 2-40 MiB spikes
    assert v.max() - v.min() > 20 * (1 << 20)
    r = detect(t, v)
    assert r.verdict is Verdict.LEAK
    assert r.slope == pytest.approx(2 * KIB, rel=0.15)


@pytest.mark.parametrize("seed", SEEDS)
def test_single_step_then_flat_is_stable(seed: int) -> None:
    r = detect(*S.step(seed))
    assert r.verdict is Verdict.STABLE


@pytest.mark.parametrize("seed", SEEDS)
def test_warmup_plateau_is_stable(seed: int) -> None:
    r = detect(*S.warmup(seed))
    # seed 4's slowest warm-up still creeps up at the end of the window
    assert r.verdict is (Verdict.INCONCLUSIVE if seed == 4 else Verdict.STABLE), r.reason
    assert "stopped" in r.reason


@pytest.mark.parametrize("seed", SEEDS)
def test_gc_sawtooth_is_stable(seed: int) -> None:
    t, v = S.sawtooth(seed)
    r = detect(t, v)
    assert r.verdict is Verdict.STABLE
    # the buckets were widened to hold a trough each: the floor is the base
    assert abs(np.median(r.bucket_minima) - S.BASE) < 512 * KIB


@pytest.mark.parametrize("seed", SEEDS)
def test_sawtooth_with_rising_floor_is_a_leak(seed: int) -> None:
    r = detect(*S.sawtooth(seed, floor_rate=4 * KIB))
    assert r.verdict is Verdict.LEAK
    assert r.slope == pytest.approx(4 * KIB, rel=0.2)


@pytest.mark.parametrize("n", [20, 30, 40, 60, 80])
def test_aliased_sawtooth_is_never_a_leak(n: int) -> None:
    # a sawtooth far faster than the sampling (the VM's examples/sawtooth):
    # each sample lands on a random phase, so a bucket's minimum is far from
    # the floor, and the phase can drift like a ramp for a while
    verdicts = [detect(*S.aliased_sawtooth(seed, n=n)).verdict for seed in range(200)]
    assert Verdict.LEAK not in verdicts
    if n < Params().min_samples:
        # at 20 samples (3 per bucket) 3 of these 200 passed for a leak
        assert set(verdicts) == {Verdict.NOT_ENOUGH_DATA}
        return
    growing = verdicts.count(Verdict.GROWING)
    # without the bucket-spread term and the fall-back check: 7 at 30, 6 at 40
    assert growing <= (4 if n < 60 else 0), growing


@pytest.mark.parametrize("chunk", [256 * KIB, MIB])
@pytest.mark.parametrize("jitter", [0.002, 0.01])
def test_the_e2e_sawtooth_is_stable_at_every_detection(jitter: float, chunk: float) -> None:
    # tests/guest/test_pmd_e2e.py runs examples/sawtooth -m 1 -c 256 -s 50:
    # a 250 ms period, 2.5 samples at 100 ms, so every 5 samples see the base.
    # pmd runs the detector at 30, 40, ... samples; none may say LEAK or
    # GROWING. 3 to 13 s of a 256 KiB-step sawtooth cannot rule out 64
    # KiB/min (6 KiB over 6 s) every time: STABLE or INCONCLUSIVE, never a
    # growth; nor can the same shape at 1 MiB steps (-m 4 -c 1024).
    # (A sawtooth far faster than the sampling and near-locked to it, as under
    # KVM, can drift like a ramp: with periods of 20-50 ms, 0.1-0.5 % of windows
    # up to 80 samples read as LEAK. README, "Troubleshooting".)
    for seed in range(100):
        for n in range(30, 130, 10):
            t, v = S.example_sawtooth(seed, n=n, chunk=chunk, step_s=0.05, jitter=jitter)
            r = detect(t, v)
            assert r.verdict in (Verdict.STABLE, Verdict.INCONCLUSIVE), (seed, n, r.reason)


def test_the_e2e_sawtooths_recorded_samples_turn_stable_and_never_grow() -> None:
    # a 1 MiB-step sawtooth (examples/sawtooth -m 4 -c 1024 -s 50) as pmd
    # stored it in the guest (tests/host/data): at every detection pmd makes
    # (10 samples apart) STABLE or INCONCLUSIVE; its rss floor's steps keep
    # the interval above 64 KiB/min for about 190 s of samples, STABLE from
    # then on
    rows = [line.split() for line in
            (Path(__file__).parent / "data" / "e2e_sawtooth.txt").read_text().splitlines()
            if not line.startswith("#")]
    t = [float(a) for a, _ in rows]
    v = [float(b) for _, b in rows]
    verdicts = {n: detect(t[:n], v[:n]).verdict for n in range(30, len(t) + 1, 10)}
    assert set(verdicts.values()) <= {Verdict.STABLE, Verdict.INCONCLUSIVE}
    stable_from = min(n for n, x in verdicts.items() if x is Verdict.STABLE and
                      all(verdicts[m] is Verdict.STABLE for m in verdicts if m >= n))
    assert 120 < t[stable_from - 1] < 215, t[stable_from - 1]


def test_aliased_sawtooth_over_a_leak_is_a_leak() -> None:
    # the same sawtooth over the e2e test's leak (1.6 MB/s): 60 samples suffice
    verdicts = [detect(*S.aliased_sawtooth(seed, n=60, floor_rate=1.6e6)).verdict
                for seed in range(100)]
    assert verdicts.count(Verdict.LEAK) >= 90, verdicts


def test_a_floor_that_falls_back_is_stable() -> None:
    # a slow sawtooth: one 55 s ramp, the collapse, the next ramp's start
    t = np.arange(60.0)
    v = 5e6 + (t % 55) * 40960
    r = detect(t, v)
    # and a minute cannot rule out a slow growth: not STABLE either
    assert r.verdict is Verdict.INCONCLUSIVE
    assert r.reason.startswith("the floor fell back 2.1 MiB below its fitted line, but ")
    assert detect(t, v, Params(fallback_fraction=1e9)).verdict is Verdict.GROWING


@pytest.mark.parametrize("seed", SEEDS)
def test_vm_like_page_leak_in_60_samples(seed: int) -> None:
    r = detect(*S.page_leak(seed, n=60, dt=0.1, rate=40 * KIB))
    assert r.verdict is Verdict.LEAK
    assert r.slope == pytest.approx(40 * KIB, rel=0.1)


@pytest.mark.parametrize("seed", SEEDS)
def test_vm_like_flat_pages(seed: int) -> None:
    assert detect(*S.page_flat(seed)).verdict is Verdict.STABLE


def test_not_enough_data() -> None:
    t, v = S.leak(0, n=29)
    r = detect(t, v)
    assert r.verdict is Verdict.NOT_ENOUGH_DATA
    assert r.reason == "29 samples, need 30"
    assert detect([], []).verdict is Verdict.NOT_ENOUGH_DATA
    r = detect([5.0] * 30, list(range(30)))
    assert r.verdict is Verdict.NOT_ENOUGH_DATA
    assert r.reason == "all samples at the same time"


def test_samples_bunched_in_time_are_not_enough() -> None:
    # 40 samples, but all except one in the first instant: 2 time buckets
    t = [0.0] * 39 + [100.0]
    r = detect(t, [1e6 + i for i in range(40)])
    assert r.verdict is Verdict.NOT_ENOUGH_DATA
    assert r.reason == "samples fill 2 time buckets, need 6"


def test_order_and_nan_do_not_matter() -> None:
    t, v = S.leak(3)
    ref = detect(t, v)
    perm = np.random.default_rng(1).permutation(t.size)
    t2 = np.append(t[perm], [np.nan, 7.0])
    v2 = np.append(v[perm], [1.0, np.inf])
    r = detect(t2, v2)
    assert r.verdict is ref.verdict
    assert r.slope == ref.slope
    assert r.samples == ref.samples == 600


def test_exact_line_has_exact_slope() -> None:
    t = np.arange(100, dtype=float)
    r = detect(t, 1_000_000 + 1000 * t)
    assert r.verdict is Verdict.LEAK
    assert r.slope == 1000.0
    assert r.growth == 99_000.0
    assert r.fit(t[0]) == 1_000_000.0
    assert r.noise == 0.0


def test_constant_is_stable() -> None:
    r = detect(np.arange(300.0), np.full(300, 4096.0 * 300))
    assert r.verdict is Verdict.STABLE
    assert r.slope == 0.0


def test_a_floor_that_never_moved_rules_out_only_what_one_step_would_show() -> None:
    """rss moves in batches of up to 64 pages a thread: 100 s of an
    unchanged rss rule out 256 KiB over 99 s (155 KiB/min), not 64 KiB/min,
    and the guest's leak of 1.9 MiB/min shows a step every 8 s at most."""
    r = detect(np.arange(100.0), np.full(100, 4096.0 * 300))
    assert r.verdict is Verdict.INCONCLUSIVE and r.slope == 0.0
    assert "reaches +155.2 KiB/min" in r.reason, r.reason  # 256 KiB over 99 s
    assert r.watch_more_s is not None and 140.0 < r.watch_more_s < 160.0
    # the leak as the guest saw it: 32 KiB/s in rss steps of 256 KiB
    for seed in range(100):
        g = np.random.default_rng(seed)
        for n in (50, 100):
            t = np.arange(n) * 0.1 + g.uniform(0, 0.01, n)
            leaked = 32 * KIB * (t + g.uniform(0, 10))
            rss = (4 << 20) + np.floor(leaked / (256 * KIB)) * 256 * KIB
            assert detect(t, rss).verdict is not Verdict.STABLE, (seed, n)


def test_bucket_minima_take_each_buckets_smallest() -> None:
    t = np.arange(60, dtype=float)
    v = np.full(60, 100.0)
    v[7] = 5.0  # bucket 0 (0..9 with 6 buckets of 10)
    v[55] = 1.0  # bucket 5
    bt, bv = bucket_minima(t, v, Params(min_buckets=6, max_buckets=6, samples_per_bucket=10))
    assert list(bt) == [7.0, 10.0, 20.0, 30.0, 40.0, 55.0]
    assert list(bv) == [5.0, 100.0, 100.0, 100.0, 100.0, 1.0]


def test_params_are_validated() -> None:
    with pytest.raises(ValueError, match="confidence"):
        Params(confidence=1.0)
    with pytest.raises(ValueError, match="min_buckets"):
        Params(min_buckets=10, max_buckets=5)
    with pytest.raises(ValueError, match="min_samples"):
        Params(min_samples=3)
    with pytest.raises(ValueError, match="equal length"):
        detect([1.0, 2.0], [1.0])


def test_as_dict_is_json_ready() -> None:
    import json

    d = detect(*S.leak(0)).as_dict()
    assert d["verdict"] == "LEAK"
    assert d["rate_kib_min"] == pytest.approx(240, rel=0.15)
    json.dumps(d)


def test_seconds_until_exhausted() -> None:
    assert seconds_until_exhausted(1024.0, 1024.0 * 3600) == 3600.0
    assert seconds_until_exhausted(0.0, 1e9) is None
    assert seconds_until_exhausted(-5.0, 1e9) is None
    assert seconds_until_exhausted(10.0, 0.0) is None


def test_site_growth_ranks_growing_sites() -> None:
    snaps = []
    for i in range(10):
        ts = float(i)
        snaps.append((1, ts, 1000, 1))  # flat
        snaps.append((2, ts, 100 * i, i))  # 100 B/s
        snaps.append((3, ts, 5000 * i + 7, 2 * i))  # 5000 B/s
        snaps.append((4, ts, 9000 - 10 * i, 3))  # shrinking
    snaps.append((5, 0.0, 10, 1))  # one snapshot: no rate
    g = site_growth(snaps)
    assert [s.site for s in g] == [3, 2]
    assert g[0].slope == 5000.0
    assert g[0].first_bytes == 7 and g[0].last_bytes == 45007 and g[0].last_blocks == 18
    assert g[0].snapshots == 10
    assert g[1].rate_kib_min == pytest.approx(100 * 60 / 1024)
    assert site_growth(snaps, limit=1) == g[:1]
    two = site_growth([(9, 0.0, 0, 0), (9, 2.0, 4096, 1)])
    assert two[0].slope == 2048.0


def test_site_growth_fits_evenly_spaced_snapshots_of_a_long_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a day of pmd's snapshots (one per 10 s) would be 37 million pairs
    import pmm.analysis.trend as T

    fitted: list[tuple[float, ...]] = []
    real = T.theil_sen

    def spy(x: list[float], y: list[float], confidence: float = 0.95
            ) -> tuple[float, float, float, float]:
        fitted.append(tuple(x))
        return real(x, y, confidence)

    monkeypatch.setattr(T, "theil_sen", spy)
    snaps = [(7, 10.0 * i, 1000 + 30 * i + (i * 7919) % 97, i) for i in range(8640)]
    g = T.site_growth(snaps)
    assert len(fitted) == 1 and len(fitted[0]) == T.SITE_GROWTH_POINTS == 200
    assert fitted[0][0] == 0.0 and fitted[0][-1] == 86390.0  # first and last kept
    assert g[0].slope == pytest.approx(3.0, rel=0.01)
    # the reported sizes and count are the whole history's
    assert (g[0].first_bytes, g[0].last_bytes, g[0].snapshots) == (1000, snaps[-1][2], 8640)


def test_the_detector_does_not_import_numpy() -> None:
    # numpy was half of an installation's size; pmd and pmctl do without it
    code = ("import sys, pmm.analysis.trend as T; "
            "T.detect(range(3600), [float(i) for i in range(3600)]); "
            "T.site_growth([(1, 0.0, 1, 1), (1, 1.0, 2, 1), (1, 2.0, 4, 1)]); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


def test_a_gap_in_the_samples_narrows_the_buckets() -> None:
    # 30 samples at 0.1 s with a 1.2 s pause after the 20th (pmd busy, say):
    # 6 buckets would leave one empty; the detector uses more instead
    t = np.concatenate([np.arange(20) * 0.1, 3.1 + np.arange(10) * 0.1])
    r = detect(t, 2e6 + 40960 * t)
    assert r.verdict is Verdict.LEAK
    assert r.buckets >= 6
    assert r.slope == pytest.approx(40960)


def test_robust_sigma_is_scipys_normal_mad() -> None:
    from scipy import stats

    from pmm.analysis.trend import _robust_sigma

    x = np.random.default_rng(5).normal(3.0, 2.0, 1001)
    assert _robust_sigma(x) == pytest.approx(stats.median_abs_deviation(x, scale="normal"),
                                             rel=1e-12)


def test_theil_sen_is_scipys() -> None:
    # the same estimator and interval as scipy.stats.theilslopes, ties included
    from scipy import stats

    r = np.random.default_rng(7)
    for n in (2, 3, 6, 17, 30, 101):
        for conf in (0.8, 0.95, 0.99):
            x = np.sort(r.uniform(0, 100, n))
            y = 3.0 * x + r.normal(0, 20, n)
            for xs, ys in ((x, y), (np.floor(x / 10), np.floor(y / 50))):  # with ties
                want = stats.theilslopes(ys, xs, alpha=conf)
                got = theil_sen(xs, ys, conf)
                assert got == pytest.approx((want.slope, want.intercept, want.low_slope,
                                             want.high_slope), nan_ok=True), (n, conf)
    assert all(math.isnan(v) for v in theil_sen(np.ones(4), np.arange(4.0)))


def test_trend_does_not_import_scipy() -> None:
    # scipy costs half a second to import here and minutes on the VM's 9p
    code = ("import sys, pmm.analysis.trend as T; "
            "T.detect(range(40), [float(i) for i in range(40)]); "
            "T.site_growth([(1, 0.0, 1, 1), (1, 1.0, 2, 1), (1, 2.0, 4, 1)]); "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


# -- STABLE needs evidence: the interval must rule out every rate that matters --

MIB_MIN = (1 << 20) / 60.0  # 1 MiB/min in bytes/s


def test_rate_that_matters_is_available_memory_over_the_horizon() -> None:
    p = Params()
    # 30 days, clamped to 16 KiB/min .. 64 KiB/min
    assert rate_that_matters(p, 1 << 30) == pytest.approx((1 << 30) / (30 * 86400))
    assert rate_that_matters(p, 1 << 40) == p.max_rate == pytest.approx(MIB_MIN / 16)
    assert rate_that_matters(p, 100 << 20) == p.min_rate == pytest.approx(MIB_MIN / 64)
    assert rate_that_matters(p, None) == p.max_rate
    assert rate_that_matters(p, 0) == p.min_rate
    assert rate_that_matters(Params(horizon_s=86400, max_rate=MIB_MIN), 1 << 30) == \
        pytest.approx((1 << 30) / 86400)
    with pytest.raises(ValueError):
        Params(min_rate=2.0, max_rate=1.0)


@pytest.mark.parametrize("watch_s", [5.0, 10.0])
def test_a_slow_leak_watched_for_seconds_is_never_stable(watch_s: float) -> None:
    """The issue's case: about 1.8 MiB/min watched 5 s and 10 s at 100 ms.
    Before, STABLE (exit 0) with a 95% interval of -14.8 .. +15.2 MiB/min."""
    rate = 1.8 * MIB_MIN
    n = int(watch_s / 0.1)
    for seed in range(100):
        t, v = S.page_leak(seed, n=n, dt=0.1, rate=rate)
        # request noise: some samples a few MiB above the floor
        v = v + np.random.default_rng(seed).choice([0.0, 0.0, 0.0, 4 * (1 << 20)], n)
        for available in (None, 1 << 30, 64 << 30):
            r = detect(t, v, available=available)
            assert r.verdict is not Verdict.STABLE, (seed, available, r.reason)
            if r.verdict is Verdict.INCONCLUSIVE:
                assert r.slope_high >= r.matters
                assert r.watch_more_s is not None and r.watch_more_s >= 0.0


@pytest.mark.parametrize("n", [120, 300, 600])
def test_held_out_slow_leak_under_request_spikes_is_never_stable(n: int) -> None:
    """The held-out corpus' case (STABLE in one run of three before): a slow
    leak under request spikes, over windows of 2, 5 and 10 minutes."""
    verdicts = collections.Counter(
        detect(*S.leak_spikes(seed, rate=2 * KIB, n=n), available=8 << 30).verdict
        for seed in range(60))
    assert Verdict.STABLE not in verdicts, verdicts
    if n == 600:
        assert verdicts[Verdict.LEAK] >= 55, verdicts


def test_inconclusive_says_how_long_to_watch() -> None:
    """Flat noise watched for a minute: INCONCLUSIVE, with an estimate of the
    watch still needed; twice that much more (the estimate rests on one
    noisy interval) gives STABLE in most runs, never LEAK."""
    stable = 0
    for seed in range(20):
        t, v = S.flat(seed, n=60, dt=1.0)
        r = detect(t, v, available=1 << 30)
        if r.verdict is not Verdict.INCONCLUSIVE:  # GROWING, once in 20: noise
            stable += r.verdict is Verdict.STABLE
            continue
        assert "matters" in r.reason and r.watch_more_s is not None
        assert 0.0 < r.watch_more_s < 4 * 3600.0, r.watch_more_s
        r2 = detect(*S.flat(seed, n=60 + int(2 * r.watch_more_s), dt=1.0), available=1 << 30)
        stable += r2.verdict is Verdict.STABLE
        assert r2.verdict is not Verdict.LEAK
    assert stable >= 12, stable


def test_not_enough_data_says_how_long_to_watch() -> None:
    r = detect(np.arange(10) * 0.5, np.full(10, 1e6))
    assert r.verdict is Verdict.NOT_ENOUGH_DATA
    assert r.watch_more_s == pytest.approx(20 * 0.5)


def test_watch_longer_follows_the_slopes_error() -> None:
    # interval +-4 around 0, deciding width 1: 4 times the span (error ~ 1/T)
    assert watch_longer(100.0, 0.0, 4.0, 1.0) == pytest.approx(300.0)
    assert watch_longer(100.0, 0.0, 0.5, 1.0) == 0.0
    # a slope near the rate that matters needs the interval to exclude 0 or it
    assert watch_longer(100.0, 0.9, 1.9, 1.0) == pytest.approx(100 * (1 / 0.9 - 1))
