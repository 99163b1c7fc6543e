"""Synthetic memory series for the trend detector's tests (seeded, bytes)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F = npt.NDArray[np.float64]
MIB = 1 << 20
KIB = 1 << 10
BASE = 50 * MIB


def _t(n: int, dt: float) -> F:
    return np.arange(n, dtype=np.float64) * dt


def flat(seed: int, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    r = np.random.default_rng(seed)
    return _t(n, dt), BASE + r.normal(0, 200 * KIB, n)


def leak(seed: int, rate: float = 4 * KIB, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    """Steady leak of `rate` bytes/s under Gaussian noise."""
    r = np.random.default_rng(seed)
    t = _t(n, dt)
    return t, BASE + rate * t + r.normal(0, 200 * KIB, n)


def leak_spikes(seed: int, rate: float = 2 * KIB, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    """A slow leak (1.2 MiB over the window) under transient spikes of 2-40 MiB."""
    r = np.random.default_rng(seed)
    t = _t(n, dt)
    v = BASE + rate * t + r.normal(0, 50 * KIB, n)
    i = 0
    while i < n:
        i += int(r.integers(5, 30))
        w = int(r.integers(1, 4))
        v[i : i + w] += r.uniform(2, 40) * MIB
        i += w
    return t, v


def step(seed: int, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    """Flat, one step up of 8 MiB somewhere in the first half, flat again."""
    r = np.random.default_rng(seed)
    t = _t(n, dt)
    at = r.uniform(0.2, 0.5) * t[-1]
    return t, BASE + np.where(t >= at, 8 * MIB, 0) + r.normal(0, 200 * KIB, n)


def warmup(seed: int, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    """Grows 30 MiB while warming up (time constant a tenth of the window), then plateaus."""
    r = np.random.default_rng(seed)
    t = _t(n, dt)
    tau = r.uniform(0.06, 0.12) * t[-1]
    return t, BASE + 30 * MIB * (1 - np.exp(-t / tau)) + r.normal(0, 200 * KIB, n)


def sawtooth(seed: int, floor_rate: float = 0.0, n: int = 600, dt: float = 1.0) -> tuple[F, F]:
    """GC-like: ramps up 10-20 MiB over a period of 20-40 samples, collapses to the floor.
    floor_rate > 0: the floor rises (bytes/s), a leak under the sawtooth."""
    r = np.random.default_rng(seed)
    t = _t(n, dt)
    amp = r.uniform(10, 20) * MIB
    v = np.empty(n)
    i = 0
    while i < n:
        p = int(r.integers(20, 41))
        seg = np.arange(min(p, n - i))
        v[i : i + seg.size] = amp * seg / p
        i += p
    return t, BASE + floor_rate * t + v + r.normal(0, 100 * KIB, n)


def page_leak(seed: int, n: int = 60, dt: float = 0.1, rate: float = 40 * KIB) -> tuple[F, F]:
    """What the VM sees: rss in whole pages, a C program leaking `rate` bytes/s."""
    r = np.random.default_rng(seed)
    t = _t(n, dt) + r.uniform(0, 0.01, n)
    pages = np.floor((2 * MIB + rate * t) / 4096) + r.integers(0, 2, n)
    return t, (pages * 4096).astype(np.float64)


def page_flat(seed: int, n: int = 60, dt: float = 0.1) -> tuple[F, F]:
    r = np.random.default_rng(seed)
    t = _t(n, dt) + r.uniform(0, 0.01, n)
    return t, (512 + r.integers(0, 3, n)).astype(np.float64) * 4096



def example_sawtooth(seed: int, n: int = 60, dt: float = 0.1, steps: int = 4,
                     chunk: float = MIB, step_s: float = 0.005, jitter: float = 0.01,
                     floor_rate: float = 0.0) -> tuple[F, F]:
    """What the VM's sampler sees of examples/sawtooth -c chunk -s step_s: one
    chunk more every step_s up to `steps`, all freed, one step_s at the base.
    The period varies by 15 % (malloc and memset time); sample times jitter
    by up to `jitter` s (0.002: KVM, 0.01: TCG). floor_rate > 0: the floor
    rises too (bytes/s). In rss pages."""
    r = np.random.default_rng(seed)
    t = np.arange(n) * dt + r.uniform(0, jitter, n)
    period = (steps + 1) * step_s * r.uniform(1.0, 1.15)
    phase = (t / period + r.uniform()) % 1.0
    level = np.floor(phase * (steps + 1)) * chunk
    pages = np.floor((4 * MIB + floor_rate * t + level) / 4096)
    return t, ((pages + r.integers(0, 3, n)) * 4096).astype(np.float64)


def aliased_sawtooth(seed: int, n: int = 60, dt: float = 0.1,
                     floor_rate: float = 0.0) -> tuple[F, F]:
    """A 1 MiB-step sawtooth of period 20-50 ms sampled every 100 ms with a
    drifting sampler: each sample lands on a random phase."""
    r = np.random.default_rng(seed)
    t = np.cumsum(dt + r.uniform(-0.1 * dt, 0.1 * dt, n))
    phase = (t / r.uniform(0.02, 0.05)) % 1.0
    pages = np.floor((4 * MIB + floor_rate * t + np.floor(phase * 5) * MIB) / 4096)
    return t, ((pages + r.integers(0, 3, n)) * 4096).astype(np.float64)


# a process whose rss grows 64 KiB every 20 ms (3 MiB/s); prints "ready" first
LEAKER = """
import time
keep = []
print("ready", flush=True)
while True:
    b = bytearray(64 * 1024)
    for i in range(0, len(b), 4096):
        b[i] = 1
    keep.append(b)
    time.sleep(0.02)
"""
