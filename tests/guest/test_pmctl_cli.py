"""pmctl against the real module (in the VM, as root).

Round trips of start/stop/status/config with values asserted, and `pmctl run`
on a program with known leaks at known lines: `leaks` names them first with
their exact bytes, `stats` matches the program's calls, `logs` matches
/proc/pmm/pid, `--json` holds the same numbers as the tables.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TOP, pmctl, pmctl_json

from pmm.analysis.leaks import age_bucket
from pmm.kernel import pmmfiles, uapi

HOOKLIB = TOP / "hooklib" / "libpmmhook.so"
LEAK = TOP / "examples" / "bin" / "leak"
EXIT_OF = {"STABLE": 0, "LEAK": 10, "GROWING": 11, "NOT ENOUGH DATA": 12, "INCONCLUSIVE": 13}


def test_pmctl_config_roundtrip(pmm: None, cache: Path) -> None:
    before = pmctl_json("config")
    assert before["abi_version"] == uapi.ABI_VERSION and before["monitored_pids"] == 0
    after = pmctl_json("config", "--interval", "250ms", "--scan", "off", "--max-pids", "10",
                       "--max-blocks", "5000", "--max-sites", "300", "--max-samples", "100",
                       "--max-pids-per-uid", "4", "--exited-ttl", "90")
    want = {"interval_ms": 250, "scan": 0, "max_pids": 10, "max_blocks_per_pid": 5000,
            "max_sites_per_pid": 300, "max_samples_per_pid": 100, "max_pids_per_uid": 4,
            "exited_ttl_s": 90}
    assert {k: after[k] for k in want} == want
    cfg = pmmfiles.read_cfg()
    assert (cfg["INTERVAL"].value, cfg["SCAN"].value, cfg["MAX_PIDS"].value,
            cfg["MAX_BLOCKS"].value, cfg["MAX_SITES"].value, cfg["MAX_SAMPLES"].value,
            cfg["MAX_PIDS_PER_UID"].value, cfg["EXITED_TTL"].value) == \
        (250, 0, 10, 5000, 300, 100, 4, 90)
    # the table says the same
    r = pmctl("config")
    assert r.exit_code == 0
    rows = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1) for ln in r.stdout.splitlines()[1:])
    assert rows["interval"] == "250ms" and rows["scan"] == "off" and rows["max pids"] == "10"
    # a value the module refuses: exit 7, nothing changed (one SET_CONFIG for all)
    r = pmctl("config", "--interval", "300ms", "--max-pids", "2000")
    assert r.exit_code == 7
    assert "the module refused the value (EINVAL" in r.stderr
    assert pmctl_json("config") == after
    r = pmctl("config", "--scan", "on")
    assert r.exit_code == 0 and pmctl_json("config")["scan"] == 1


def _in_child(drop: str, args: list[str]) -> tuple[int, str]:
    """Runs pmctl in a forked child with fewer privileges (a new Python would
    take tens of seconds to start under TCG): drop="caps" clears all
    capabilities (still uid 0, the owner of /dev/pmm), drop="uid" becomes nobody."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 99
        try:
            os.close(rfd)
            if drop == "caps":
                libc = ctypes.CDLL(None, use_errno=True)
                hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
                data = (ctypes.c_uint32 * 6)()  # effective/permitted/inheritable x 2: none
                if libc.capset(hdr, data) != 0:
                    os._exit(98)
            else:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            r = pmctl(*args)
            os.write(wfd, r.stderr.encode())
            code = r.exit_code
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out


def test_pmctl_not_permitted(pmm: None) -> None:
    # root without capabilities opens /dev/pmm (its owner) but may not configure
    code, err = _in_child("caps", ["config", "--interval", "300ms"])
    assert code == 4, err
    assert err.strip() == (
        "pmctl: changing the configuration: permission denied (EPERM): "
        "run as root (changing the configuration needs CAP_SYS_ADMIN)")
    assert pmmfiles.read_cfg()["INTERVAL"].value != 300
    # nobody may not open /dev/pmm (mode 0600)
    code, err = _in_child("uid", ["status"])
    assert code == 4, err
    assert err.strip() == ("pmctl: opening /dev/pmm: permission denied (EACCES): the device "
                           "is root-only by default; run as root, or have a udev rule grant "
                           "your group access")


def test_pmctl_start_status_stop(pmm: None, cache: Path,
                                 sleeper: subprocess.Popen[bytes]) -> None:
    pid = sleeper.pid
    r = pmctl("start", str(pid), "--interval", "50ms")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == f"monitoring pid {pid} (sleep)"
    assert pmmfiles.read_cfg()["START_PID"].value == pid
    assert pmmfiles.read_cfg()["INTERVAL"].value == 50
    time.sleep(0.4)  # a few samples
    st = pmctl_json("status")
    assert st["config"]["interval_ms"] == 50 and st["config"]["monitored_pids"] == 1
    (p,) = st["pids"]
    assert (p["pid"], p["comm"], p["state"], p["live_blocks"], p["live_bytes"]) == \
        (pid, "sleep", "running", 0, 0)
    assert p["ppid"] == os.getpid()
    assert p["samples"] >= 1 and p["rss_bytes"] > 0 and p["vm_bytes"] >= p["rss_bytes"]
    proc = pmmfiles.read_pid().pids[pid]
    assert (proc.comm, proc.state, proc.log_count) == ("sleep", 1, 0)
    table = pmctl("status").stdout.splitlines()
    assert table[0].split() == ["PID", "COMM", "STATE", "UPTIME", "BLOCKS", "LIVE", "RSS",
                                "VM", "DROPPED", "UNMATCHED", "OLDER"]
    assert table[1].split()[:3] == [str(pid), "sleep", "running"]
    assert re.split(r"\s{2,}", table[1].strip())[4:6] == ["0", "0 B"]  # BLOCKS, LIVE
    # start twice: refused, one line
    r = pmctl("start", str(pid))
    assert r.exit_code == 1 and f"pid {pid} is already monitored" in r.stderr
    # stop, then everything says "not monitored"
    r = pmctl("stop", str(pid), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"pid": pid, "monitored": False}
    assert pmctl_json("status")["pids"] == []
    assert pmmfiles.read_cfg()["STOP_PID"].value == pid
    for cmd in ("stop", "logs", "leaks", "stats"):
        r = pmctl(cmd, str(pid))
        assert r.exit_code == 6, (cmd, r.stderr)
        assert f"pid {pid} is not monitored" in r.stderr
    # a pid that does not exist
    r = pmctl("start", "4194000")
    assert r.exit_code == 5
    assert r.stderr.strip() == ("pmctl: starting pid 4194000: no such process: "
                                "pid 4194000 does not exist")


LEAK_C = r"""#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

void shim_leak(void);
static void *keep[16];

__attribute__((noinline)) void leak_some(int n)
{
	for (int i = 0; i < n; i++)
		keep[i] = malloc(1000);	/* LEAK_LINE */
}

int main(void)
{
	leak_some(5);	/* CALL_LINE */
	keep[5] = malloc(200);	/* LEAK2_LINE */
	void *c = calloc(4, 8);
	void *r = malloc(10);
	r = realloc(r, 3000);
	free(c);
	free(r);
	for (int i = 0; i < 3; i++) {
		void *t = malloc(20000);
		free(t);
	}
	void *big = malloc((size_t)1 << 62);	/* fails */
	keep[6] = big;
	shim_leak();
	usleep(300000);
	return 3;
}
"""

# A second file of the same program, built with pmm_hooks.h: its site
# carries file, function and line itself.
SHIM_C = r"""#include <stdlib.h>
#include "pmm_hooks.h"

static void *kept[3];

void shim_leak(void)
{
	for (int i = 0; i < 3; i++)
		kept[i] = malloc(64);	/* SHIM_LINE */
}
"""


def line_of(src: str, tag: str) -> int:
    return next(i for i, ln in enumerate(src.splitlines(), 1) if tag in ln)


@pytest.fixture(scope="module")
def leak_prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("leak")
    (d / "leak.c").write_text(LEAK_C)
    (d / "shim.c").write_text(SHIM_C)
    subprocess.run(["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-I", str(TOP / "hooklib"),
                    "-o", "leak", "leak.c", "shim.c"], cwd=d, check=True)
    return d / "leak"


def run_under_pmctl(prog: Path, *opts: str) -> int:
    """`pmctl run` in process (a new Python starts slowly under TCG)."""
    r = pmctl("run", *opts, "--", str(prog))
    assert r.exit_code == 3, r.stderr  # the program's own exit status
    m = re.search(r"^pmctl: pid (\d+)$", r.stderr, re.M)
    assert m, r.stderr
    return int(m.group(1))


@pytest.mark.skipif(not HOOKLIB.exists(), reason="hooklib/libpmmhook.so not built")
def test_pmctl_run_leaks_stats_logs(pmm: None, cache: Path, leak_prog: Path) -> None:
    assert pmctl("config", "--interval", "50ms").exit_code == 0  # notice the exit soon
    pid = run_under_pmctl(leak_prog, "--depth", "2")
    for _ in range(100):  # the sampler marks it exited at its next tick
        if pmctl_json("status")["pids"][0]["state"] == "exited":
            break
        time.sleep(0.05)
    leak_line, leak2_line = line_of(LEAK_C, "LEAK_LINE"), line_of(LEAK_C, "LEAK2_LINE")
    call_line, shim_line = line_of(LEAK_C, "CALL_LINE"), line_of(SHIM_C, "SHIM_LINE")
    # maps were captured while it ran (it exited since)
    assert list((cache / "maps").glob(f"{pid}-*"))

    # leaks: the 5 x 1000 bytes first, at leak.c:LEAK_LINE, then 200 and the shim's 192
    lk = pmctl_json("leaks", str(pid))
    assert (lk["pid"], lk["comm"], lk["state"]) == (pid, "leak", "exited")
    assert (lk["live_blocks"], lk["live_bytes"]) == (9, 5392)
    s0, s1, s2 = lk["sites"]
    assert (s0["func"], os.path.basename(s0["file"]), s0["line"]) == \
        ("leak_some", "leak.c", leak_line)
    assert (s0["blocks"], s0["bytes"], s0["source"]) == (5, 5000, "debuginfo")
    h = s0["histogram"]
    assert list(h) == ["<1s", "<10s", "<100s", "<1000s", "older"]
    assert sum(h.values()) == 5 and 0 <= s0["newest_age_s"] <= s0["oldest_age_s"] < 600
    lo, hi = age_bucket(s0["newest_age_s"]), age_bucket(s0["oldest_age_s"])
    assert all(n == 0 for i, n in enumerate(h.values()) if not lo <= i <= hi)
    assert [(f["func"], f["line"]) for f in s0["frames"]] == [("leak_some", leak_line)]
    # --depth 2: the site's two frames (the hook recorded two: `run --depth 2`)
    (top,) = pmctl_json("leaks", str(pid), "--depth", "2", "--limit", "1")["sites"]
    assert [(f["func"], f["line"]) for f in top["frames"]] == \
        [("leak_some", leak_line), ("main", call_line)]
    assert (s1["func"], s1["line"], s1["blocks"], s1["bytes"]) == ("main", leak2_line, 1, 200)
    assert (s2["source"], s2["func"], s2["file"], s2["line"], s2["blocks"], s2["bytes"]) == \
        ("shim", "shim_leak", "shim.c", shim_line, 3, 192)
    assert s2["where"] == f"shim_leak() shim.c:{shim_line}"
    table = pmctl("leaks", str(pid)).stdout.splitlines()
    assert table[0] == f"pid {pid} (leak, exited): 9 live blocks, 5.3 KiB in 3 sites"
    first = table[2].split()
    assert first[:3] == ["4.9", "KiB", "5"]  # 5000 bytes in 5 blocks
    assert first[-2:] == ["leak_some()", f"leak.c:{leak_line}"]

    # stats: exactly the program's calls
    st = pmctl_json("stats", str(pid))
    rows = {b["bucket"]: b for b in st["buckets"]}

    def counts(b: str) -> tuple[int, ...]:
        r = rows[b]
        return (r["malloc"], r["calloc"], r["realloc"], r["free"], r["alloc_bytes"],
                r["freed_bytes"], r["inuse_bytes"])

    assert counts("<= 16") == (1, 0, 0, 1, 10, 10, 0)  # malloc(10), moved by realloc
    # malloc(200) and 3 x malloc(64) kept, calloc(4, 8) freed
    assert counts("<= 256") == (4, 1, 0, 1, 424, 32, 392)
    assert counts("<= 1024") == (5, 0, 0, 0, 5000, 0, 5000)
    assert counts("<= 4096") == (0, 0, 1, 1, 3000, 3000, 0)
    assert counts("<= 16384") == (0,) * 7
    assert counts("<= 65536") == (3, 0, 0, 3, 60000, 60000, 0)
    assert counts("larger") == (0,) * 7
    t = st["totals"]
    assert (t["malloc"], t["calloc"], t["realloc"], t["free"], t["inuse_bytes"]) == \
        (13, 1, 1, 6, 5392)
    assert st["failed_allocs"] == 1 and st["unmatched_frees"] == 0
    text = pmctl("stats", str(pid)).stdout
    assert "Failed allocations: 1" in text
    assert re.search(r"^<= 1024 bytes\s+5\s+0\s+0\s+0\s+5000\s+0\s+5000$", text, re.M)

    # logs: the same blocks as /proc/pmm/pid, oldest first
    lg = pmctl_json("logs", str(pid))
    assert lg["total"] == 9 and len(lg["blocks"]) == 9
    times = [b["time_ns"] for b in lg["blocks"]]
    assert times == sorted(times)
    assert sorted(b["size"] for b in lg["blocks"]) == [64] * 3 + [200] + [1000] * 5
    proc = pmmfiles.read_pid().pids[pid]
    assert (proc.comm, proc.state, proc.log_count) == ("leak", 2, 9)
    assert sorted(b.key() for b in proc.blocks) == sorted(
        (b["op"], b["size"], b["ptr"], None) for b in lg["blocks"])
    assert sorted(b.caller or 0 for b in proc.blocks) == sorted(
        b["caller"] for b in lg["blocks"])
    assert sorted((b.func, b.line, b.file) for b in proc.blocks if b.func) == \
        [("shim_leak", shim_line, "shim.c")] * 3
    text_lines = pmctl("logs", str(pid)).stdout.splitlines()
    assert text_lines[0] == proc.raw[proc.raw.index("PID:"):]
    strip = re.compile(r" @\d\d:\d\d:\d\d\}")
    assert proc.dropped is None and not text_lines[1].startswith("Dropped:")  # all zero
    assert sorted(strip.sub("}", ln) for ln in text_lines[1:]) == \
        sorted(strip.sub("}", b.raw) for b in proc.blocks)
    assert len(pmctl_json("logs", str(pid), "--limit", "2")["blocks"]) == 2
    assert pmctl_json("logs", str(pid), "--since", "0")["blocks"] == []

    # status agrees
    (p,) = [x for x in pmctl_json("status")["pids"] if x["pid"] == pid]
    assert (p["state"], p["live_blocks"], p["live_bytes"]) == ("exited", 9, 5392)
    assert pmctl("stop", str(pid)).exit_code == 0


@pytest.mark.parametrize("watch", ["5s", "10s"])
def test_trend_watch_of_a_slow_leak_is_never_stable(watch: str) -> None:
    """Issue 41's case: a process leaking about 1.8 MiB/min (16 KiB every
    500 ms, written) watched 5 s and 10 s. Before, STABLE and exit 0 with an
    interval of -14.8 .. +15.2 MiB/min: a script read it as healthy."""
    p = subprocess.Popen([str(LEAK), "-n", "100000", "-b", "16384", "-s", "500"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().startswith("leak: pid ")
        r = pmctl("trend", str(p.pid), "--watch", watch, "--json")
        d = json.loads(r.stdout)
        assert d["verdict"] != "STABLE", d["reason"]
        assert r.exit_code == EXIT_OF[d["verdict"]] != 0, (r.exit_code, d["reason"])
        if d["verdict"] == "INCONCLUSIVE":
            # the interval, or one rss step over the window, admits what matters
            assert "above the" in d["reason"] and d["matters_bytes_min"] > 0, d
            assert d["watch_more_s"] is not None and d["watch_more_s"] >= 0, d
    finally:
        p.kill()
        p.wait()
