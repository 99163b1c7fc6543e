"""Site ids carry no address information (DESIGN decision 13): the hook
numbers its sites 1, 2, 3... in order of first use, whatever the addresses
ASLR gave the code, and keeps each number for the life of the process.
Checked with the fake-device build, which logs the sites it registers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hook_env import (
    NR_QUERY_SELF,
    NR_RECORD_LOG,
    NR_REGISTER_SITE,
    FakeCall,
    clean_env,
    fake_log_calls,
)

from pmm.kernel.uapi import Op

TOP = Path(__file__).resolve().parents[2]
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
PROGS = TOP / "tests" / "progs" / "bin"
SITES = PROGS / "sites"
INHOOK = PROGS / "inhook"
SIZES = (40, 72, 136)  # sites's three call sites, first used in this order


def run_sites(log: Path, ms: int, **env: str) -> tuple[int, list[FakeCall]]:
    """sites's load base and the calls its hook made."""
    e = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_FAKE_LOG=str(log), **env)
    r = subprocess.run([str(SITES), str(ms)], env=e, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stderr) == (0, "")
    return int(r.stdout, 16), fake_log_calls(log)


def registered(calls: list[FakeCall]) -> list[tuple[int, int]]:
    """(id, first frame) of each site registration, in order."""
    return [(c.site.site, c.site.frames[0]) for c in calls
            if c.nr == NR_REGISTER_SITE and c.result == 0 and c.site is not None]


def site_by_size(calls: list[FakeCall]) -> dict[int, set[int]]:
    """The site ids of the records of sites's blocks, by size."""
    out: dict[int, set[int]] = {}
    for c in calls:
        for r in c.records:
            if c.result == 0 and r.op == Op.MALLOC and r.size in SIZES:
                out.setdefault(r.size, set()).add(r.site)
    return out


def test_site_ids_are_numbers_not_addresses(tmp_path: Path) -> None:
    """sites run twice: ASLR loads it (and libc) elsewhere each time, and
    its three call sites are registered with the same ids both times, 1, 2
    and 3 in order of first use (then 4, printf's buffer in libc), at the
    same offsets from the program's load base but other addresses. The ids
    used to be slot numbers of a hash of the return address: different in
    each run, and from a few of them one could find the load base."""
    if Path("/proc/sys/kernel/randomize_va_space").read_text().strip() == "0":
        pytest.skip("ASLR is off")
    runs = [run_sites(tmp_path / f"calls{i}.bin", 0) for i in range(2)]
    (base1, calls1), (base2, calls2) = runs
    sites1, sites2 = registered(calls1), registered(calls2)
    assert base1 != base2
    assert [i for i, _ in sites1] == [i for i, _ in sites2] == [1, 2, 3, 4]
    assert [f - base1 for _, f in sites1[:3]] == [f - base2 for _, f in sites2[:3]]
    assert all(f1 != f2 for (_, f1), (_, f2) in zip(sites1, sites2, strict=True))
    for calls in (calls1, calls2):
        assert site_by_size(calls) == {40: {1}, 72: {2}, 136: {3}}


def test_site_ids_kept_when_monitoring_starts_again(tmp_path: Path) -> None:
    """sites for 1.5 s in batches of 512 records; the fake module refuses
    the second batch (PMM_FAKE_STOP_AT=2: stopped, then started again).
    The hook stops, finds itself monitored at its next query (about a
    second later) and, in the new epoch, registers the sites again: the
    same ids for the same code, and the records after the restart carry
    them (printf's buffer, first used after the restart, gets 4)."""
    _, calls = run_sites(tmp_path / "calls.bin", 1500, PMM_FAKE_STOP_AT="2",
                         PMM_BUFFER="512")
    refused = [i for i, c in enumerate(calls) if c.nr == NR_RECORD_LOG and c.result < 0]
    assert len(refused) == 1
    before, after = calls[:refused[0]], calls[refused[0]:]
    restart = next(i for i, c in enumerate(after) if c.nr == NR_QUERY_SELF and c.result == 1)
    first, again = registered(before), registered(after)
    assert [i for i, _ in first] == [1, 2, 3]
    # the new epoch starts mid-loop, and printf's buffer (id 4) comes last
    assert sorted(again) == sorted([*first, again[-1]]) and again[-1][0] == 4
    assert site_by_size(after[restart:]) == {40: {1}, 72: {2}, 136: {3}}


def test_site_whose_claim_never_finished_gets_an_id(tmp_path: Path) -> None:
    """inhook: the fake device raises SIGUSR1 in the program's first claim
    of a site's slot, after the key is taken and before the id is; the
    handler allocates 200 bytes (another site, first to get an id: 1) and
    leaves with siglongjmp, so the claiming call never stores one. The
    site's next use finds its key with no id and gives it the next, 2; the
    records of its blocks of 48 and 56 bytes carry it, and it is registered
    (then 3: printf's buffer). The id used to stay 0 for the life of the
    process, as when the claiming thread is forked away or cancelled in
    that window."""
    log = tmp_path / "calls.bin"
    e = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_BUFFER="512",
                  PMM_FAKE_RAISE="claim:1", PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(INHOOK), "jump"], env=e, capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "jumped\n", "")
    calls = fake_log_calls(log)
    ids: dict[int, set[int]] = {}
    for c in calls:
        for rec in c.records:
            if rec.op == Op.MALLOC and rec.size in (48, 56, 200):
                ids.setdefault(rec.size, set()).add(rec.site)
    assert ids == {200: {1}, 48: {2}, 56: {2}}
    assert [i for i, _ in registered(calls)] == [1, 2, 3]
