"""The module's state as people read it: `pmctl status`'s table of the
monitored pids and its closing line of global counters, `pmctl config`'s
settings (their JSON is the models' to_dict, pmm.kernel.model)."""

from __future__ import annotations

from collections.abc import Sequence

from pmm.kernel.model import ConfigInfo, PidInfo
from pmm.output import format_table, human_age
from pmm.units import format_duration, human_bytes

NO_PIDS = "no monitored pids (start one with `pmctl start PID` or `pmctl run`)"


def render_pids(pids: Sequence[PidInfo], now_boottime_ns: int) -> str:
    """Per pid: pid, comm, state, uptime, live blocks and bytes, rss, vm and
    the counters of records pmm could not pair (NO_PIDS when none)."""
    headers = ["PID", "COMM", "STATE", "UPTIME", "BLOCKS", "LIVE", "RSS", "VM", "DROPPED",
               "UNMATCHED", "OLDER"]
    rows = [
        [
            str(p.pid),
            p.comm,
            p.state_name,
            human_age(p.uptime_s(now_boottime_ns)),
            str(p.live_blocks),
            human_bytes(p.live_bytes),
            human_bytes(p.rss_bytes),
            human_bytes(p.vm_bytes),
            str(p.dropped_records),
            str(p.unmatched_frees),
            str(p.older_frees),
        ]
        for p in pids
    ]
    if not rows:
        return NO_PIDS
    return format_table(headers, rows, right={0, 3, 4, 5, 6, 7, 8, 9, 10})


def render_counters(c: ConfigInfo) -> str:
    """`pmctl status`'s closing line: the settings and global counters."""
    return (
        f"interval {format_duration(c.interval_ms / 1000)}, "
        f"scan {'on' if c.scan else 'off'}, "
        f"monitored {c.monitored_pids}/{c.max_pids}, "
        f"records accepted {c.records_accepted}, dropped {c.records_dropped}, "
        f"unmatched frees {c.unmatched_frees}, frees of older blocks {c.older_frees}, "
        f"kernel memory {human_bytes(c.kmem_bytes)}"
    )


def render_config(c: ConfigInfo) -> str:
    """`pmctl config`'s table: each setting and counter on a row."""
    rows = [
        ["interval", format_duration(c.interval_ms / 1000)],
        ["scan", "on" if c.scan else "off"],
        ["last started pid", str(c.start_pid)],
        ["last stopped pid", str(c.stop_pid)],
        ["max pids", str(c.max_pids)],
        ["max blocks per pid", str(c.max_blocks_per_pid)],
        ["max sites per pid", str(c.max_sites_per_pid)],
        ["max samples per pid", str(c.max_samples_per_pid)],
        ["max pids per user", str(c.max_pids_per_uid)],
        ["exited pids kept", format_duration(c.exited_ttl_s)],
        ["abi version", str(c.abi_version)],
        ["monitored pids", str(c.monitored_pids)],
        ["records accepted", str(c.records_accepted)],
        ["records dropped", str(c.records_dropped)],
        ["unmatched frees", str(c.unmatched_frees)],
        ["kernel memory", human_bytes(c.kmem_bytes)],
        ["records queued", str(c.records_queued)],
        ["frees of older blocks", str(c.older_frees)],
    ]
    return format_table(["setting", "value"], rows)
