"""Scans at a LEAK alert (`Options.scan_on_leak`): the worker runs
pmm.unreachable's scan of the process (its threads stopped for
milliseconds, its copy swept) and pmd stores the result beside the alert
(`scans`, `scan_sites`), logs one line and shows the lost bytes in the
metrics. The scan needs ptrace of the process: pmd's unit has no
CAP_SYS_PTRACE (an administrator's drop-in adds it), so without it only
pmd's own user's processes are scanned, and pmd says so once."""

from __future__ import annotations

import logging
import os

from pmm.daemon.procstate import Key, ProcState
from pmm.daemon.worker import PostmortemWorker, ScanDone
from pmm.store import Store, StoreError
from pmm.units import human_bytes

log = logging.getLogger("pmd")

CAP_SYS_PTRACE = 19


class Scans:
    """Asks for scans and stores their results; counts them."""

    def __init__(self, store: Store, worker: PostmortemWorker,
                 procs: dict[Key, ProcState], scan_age: float) -> None:
        self.store = store
        self.worker = worker
        self.procs = procs  # a scanned process's lost bytes go to its state
        self.scan_age = scan_age
        self.scans = 0
        self.scan_failures = 0
        self.ptrace_said = False  # the scan's missing capability, said once

    def request(self, st: ProcState) -> None:
        """Asks the worker to scan the process for unreachable blocks, unless
        pmd may not ptrace it (said once: the unit's missing capability)."""
        why = ptrace_refusal(st.key[0])
        if why:
            if not self.ptrace_said:
                self.ptrace_said = True
                log.warning("--scan-on-leak: %s; processes of other users are not scanned "
                            "(this is said once)", why)
            return
        self.worker.scan(st.key, st.comm, self.scan_age)

    def scanned(self, r: ScanDone) -> None:
        """Stores a scan's row, logs it, and keeps its lost bytes for the metrics."""
        from pmm.unreachable import short_duration

        row = r.row
        try:
            self.store.add_scan(row)
        except StoreError as e:
            log.error("%s (the scan of pid %d not stored)", e, row.pid)
        if row.error is not None:
            self.scan_failures += 1
            if "ptrace" in row.error and "refused" in row.error:
                if self.ptrace_said:
                    log.debug("pid %d: not scanned: %s", row.pid, row.error)
                    return
                self.ptrace_said = True
                row_error = (f"{row.error}; pmd.service allows neither ptrace (its system "
                             "call filter) nor other users' processes (no CAP_SYS_PTRACE): "
                             "a drop-in with SystemCallFilter=@debug and the capability in "
                             "AmbientCapabilities= and CapabilityBoundingSet= lets it scan "
                             "(this is said once)")
            else:
                row_error = row.error
            log.error("pid %d (%s): the scan after LEAK failed: %s", row.pid, r.comm or "?",
                      row_error)
            return
        self.scans += 1
        st = self.procs.get(r.key)
        if st is not None:
            st.lost_bytes, st.indirect_bytes = row.definite_bytes, row.indirect_bytes
        worst = f"; most at {row.sites[0].where or f'site {row.sites[0].site}'}" \
            if row.sites else ""
        log.warning("pid %d (%s): %d blocks (%s) definitely lost, %d (%s) indirectly, in %d "
                    "sites%s (stopped %s, scanned in %s)", row.pid, r.comm or "?",
                    row.definite_blocks, human_bytes(row.definite_bytes), row.indirect_blocks,
                    human_bytes(row.indirect_bytes), len(row.sites), worst,
                    short_duration(row.longest_stop_us / 1e6),
                    short_duration(row.scan_us / 1e6))


def ptrace_refusal(pid: int) -> str:
    """Why pmd may not ptrace pid ('' when it may, as far as it can tell):
    another user's process needs CAP_SYS_PTRACE, which pmd's unit does not
    grant."""
    def field_of(path: str, key: str) -> str:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return ""

    cap = field_of("/proc/self/status", "CapEff")
    if cap and int(cap, 16) >> CAP_SYS_PTRACE & 1:
        return ""
    uid = field_of(f"/proc/{pid}/status", "Uid").split()
    if uid and all(int(u) == os.geteuid() for u in uid[:3]):
        return ""
    return (f"pmd (uid {os.geteuid()}) has no CAP_SYS_PTRACE, and pid {pid} is another "
            "user's: a drop-in for pmd.service with AmbientCapabilities= and "
            "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SYS_PTRACE and SystemCallFilter=@debug "
            "lets it scan")
