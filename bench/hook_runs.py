"""What bench/host_hook.sh and bench/host_instr.sh run: the programs, the
hook's configurations, and the environment they start from."""

from __future__ import annotations

import os


def programs(top: str, tmp: str, micro_rounds: int) -> dict[str, list[str]]:
    """The microbenchmark (micro_rounds free+malloc rounds in all, split
    over its threads) and three real programs on bench/workloads.sh's files."""
    mb = f"{top}/bench/bin/malloc_bench"
    return {
        "malloc_bench 1 thread": [mb, "-t", "1", "-n", str(micro_rounds)],
        "malloc_bench 2 threads": [mb, "-t", "2", "-n", str(micro_rounds // 2)],
        "python3 json 10k": ["/usr/bin/python3", "-s", f"{tmp}/bench.py"],
        "sqlite3 10k inserts": ["/usr/bin/sqlite3", "-init", f"{tmp}/bench.sql", ":memory:",
                                ".quit"],
        "perl hash churn": ["/usr/bin/perl", f"{tmp}/bench.pl"],
    }


def configs(top: str) -> dict[str, dict[str, str]]:
    """bare; hooked with no /dev/pmm; hooked, not monitored; exact and
    sampled through the fake-device build (batches go to a system call)."""
    hook = f"{top}/hooklib/libpmmhook.so"
    fake = f"{top}/hooklib/libpmmhook-fake.so"
    return {
        "bare": {},
        "no device": {"LD_PRELOAD": hook},
        "unmonitored": {"LD_PRELOAD": fake, "PMM_FAKE_UNMONITORED": "1"},
        "exact": {"LD_PRELOAD": fake, "PMM_START": "1"},
        "sampled": {"LD_PRELOAD": fake, "PMM_START": "1", "PMM_SAMPLE": "524288"},
    }


def base_env() -> dict[str, str]:
    """This environment without the hook's, Python's or perl's settings;
    python3's and perl's string hashes fixed, so that their work is the same
    in every run."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMM_", "PYTHON", "PERL")) and k != "LD_PRELOAD"}
    env.update(PMM_QUIET="1", PYTHONHASHSEED="0", PERL_HASH_SEED="0", PERL_PERTURB_KEYS="0")
    return env
