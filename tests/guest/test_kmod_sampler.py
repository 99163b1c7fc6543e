"""The sampler thread: growth shows in the samples, exits are detected, the
ring is bounded, SCAN 0 stops it; and its generic-netlink events."""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kmod_dev import Dev, proc_pid_lines, wait_for

from pmm.kernel import uapi

pytestmark = pytest.mark.usefixtures("pmm")
MIB = 1 << 20


@pytest.fixture()
def dev() -> Iterator[Dev]:
    d = Dev()
    yield d
    d.close()


@pytest.fixture()
def grower(progs: Path) -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen([str(progs / "grower"), "32"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline() == "ready\n"
    yield p
    p.kill()
    p.wait()


def test_growth_and_exit(dev: Dev, grower: subprocess.Popen[str]) -> None:
    assert grower.stdin is not None and grower.stdout is not None
    dev.start(grower.pid)
    dev.set_config(interval_ms=50)
    assert wait_for(lambda: dev.info(grower.pid).samples >= 2)
    before = dev.samples(grower.pid)[-1]
    grower.stdin.write("go\n")
    grower.stdin.flush()
    assert grower.stdout.readline() == "grown\n"
    n = dev.info(grower.pid).samples
    assert wait_for(lambda: dev.info(grower.pid).samples >= n + 2)
    samples = dev.samples(grower.pid)
    after = samples[-1]
    assert after.vm - before.vm == 32 * MIB
    # rss counters of a task are synced to its mm every 64 page faults (SPLIT_RSS_COUNTING)
    assert 32 * MIB - 64 * 4096 <= after.rss_anon - before.rss_anon <= 33 * MIB
    assert after.rss == after.rss_anon + after.rss_file + after.rss_shmem
    assert after.rss_file > 0
    assert all(a.time_ns < b.time_ns for a, b in zip(samples, samples[1:], strict=False))
    boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    assert 0 < boot - after.time_ns < 10 * 10**9
    info = dev.info(grower.pid)
    assert (info.state, info.exit_time_ns) == (uapi.STATE_RUNNING, 0)
    assert info.vm_bytes == dev.samples(grower.pid)[-1].vm
    # killed: it turns to exited, its data stays readable until STOP_PID
    grower.send_signal(signal.SIGKILL)
    grower.wait()
    t_kill = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    assert wait_for(lambda: dev.info(grower.pid).state == uapi.STATE_EXITED)
    info = dev.info(grower.pid)
    assert t_kill - 10**9 < info.exit_time_ns < t_kill + 5 * 10**9
    kept = dev.samples(grower.pid)
    assert len(kept) == info.samples
    time.sleep(0.2)
    assert dev.info(grower.pid).samples == info.samples  # no sampling after exit
    assert proc_pid_lines()[0].endswith(", State: 2, Log count: 0")
    dev.stop(grower.pid)
    assert dev.pids() == []


def test_ring_bounded_and_cursor(dev: Dev) -> None:
    dev.set_config(max_samples_per_pid=16, interval_ms=10)
    dev.start()
    assert wait_for(lambda: dev.info().samples >= 40)
    dev.set_config(scan=0)
    time.sleep(0.05)
    total = dev.info().samples
    samples = dev.samples()
    assert len(samples) == 16
    assert all(a.time_ns < b.time_ns for a, b in zip(samples, samples[1:], strict=False))
    # the cursor is the sample sequence number: reading from an old one starts at the oldest kept
    import ctypes

    buf = (uapi.Sample * 4)()
    r = uapi.Read(capacity=4, buf=ctypes.addressof(buf), cursor=total - 3)
    dev.ioctl(uapi.READ_SAMPLES, r)
    assert (r.count, r.done, r.total, r.cursor) == (3, 1, 16, total)
    assert [buf[i].time_ns for i in range(3)] == [s.time_ns for s in samples[-3:]]
    r = uapi.Read(capacity=4, buf=ctypes.addressof(buf), cursor=0)
    dev.ioctl(uapi.READ_SAMPLES, r)
    assert (r.count, r.done, r.cursor) == (4, 0, total - 12)
    assert buf[0].time_ns == samples[0].time_ns
    # SCAN 0: nothing more
    time.sleep(0.3)
    assert dev.info().samples == total


def test_interval_takes_effect(dev: Dev) -> None:
    dev.set_config(interval_ms=3600000)
    dev.start()
    time.sleep(0.5)
    assert dev.info().samples == 0
    dev.set_config(interval_ms=20)
    assert wait_for(lambda: dev.info().samples >= 5, timeout=5)


def test_genl_events(dev: Dev, grower: subprocess.Popen[str]) -> None:
    from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
    from pyroute2.netlink.generic import GenericNetlinkSocket

    from pmm.kernel.genl import PmmMsg

    sock = GenericNetlinkSocket()
    got: dict[int, list[PmmMsg]] = {}

    def drain(until: Callable[[], bool], timeout: float) -> None:
        """Reads the socket's datagrams without pyroute2's reader."""
        raw = sock.asyncore.socket
        end = time.monotonic() + timeout
        while not until() and time.monotonic() < end:
            if not select.select([raw], [], [], 0.2)[0]:
                continue
            data = raw.recv(1 << 16, socket.MSG_DONTWAIT)
            off = 0
            while off + 16 <= len(data):
                length, mtype = struct.unpack_from("=IH", data, off)
                chunk = data[off : off + length]
                off += (length + 3) & ~3
                if mtype == sock.prid:
                    m = PmmMsg(chunk)
                    m.decode()
                    got.setdefault(m["cmd"], []).append(m)

    try:
        sock.bind(uapi.GENL_NAME, PmmMsg)
        sock.add_membership(uapi.GENL_MCGRP_EVENTS)
        dev.start(grower.pid)
        dev.set_config(interval_ms=20)
        drain(lambda: uapi.Cmd.SITES in got, 20)
        started = got[uapi.Cmd.STARTED][0]
        assert started.get_attr("PMM_A_PID") == grower.pid
        assert started.get_attr("PMM_A_COMM") == "grower"
        assert started.get_attr("PMM_A_PPID") == os.getpid()
        info = dev.info(grower.pid)
        assert started.get_attr("PMM_A_START_TIME") == info.start_time_ns
        samples = [m for m in got[uapi.Cmd.SAMPLE] if m.get_attr("PMM_A_PID") == grower.pid]
        assert len(samples) >= 9
        kept = {s.time_ns: s for s in dev.samples(grower.pid)}
        for m in samples:
            s = kept[m.get_attr("PMM_A_TIME")]
            assert m.get_attr("PMM_A_START_TIME") == info.start_time_ns
            assert m.get_attr("PMM_A_VM") == s.vm
            assert m.get_attr("PMM_A_RSS") == s.rss
            assert m.get_attr("PMM_A_RSS_ANON") == s.rss_anon
            assert m.get_attr("PMM_A_RSS_FILE") == s.rss_file
            assert m.get_attr("PMM_A_RSS_SHMEM") == s.rss_shmem
            assert (m.get_attr("PMM_A_LIVE_BYTES"), m.get_attr("PMM_A_LIVE_BLOCKS")) == (0, 0)
        assert got[uapi.Cmd.SITES][0].get_attr("PMM_A_PID") == grower.pid
        # the dump of monitored processes
        req = PmmMsg()
        req["cmd"] = uapi.Cmd.GET_PIDS
        req["version"] = uapi.GENL_VERSION
        dump = list(sock.nlm_request(req, msg_type=sock.prid,
                                     msg_flags=NLM_F_REQUEST | NLM_F_DUMP))
        pids = [m for m in dump if m["cmd"] == uapi.Cmd.GET_PIDS]
        assert [(m.get_attr("PMM_A_PID"), m.get_attr("PMM_A_COMM"), m.get_attr("PMM_A_STATE"))
                for m in pids] == [(grower.pid, "grower", uapi.STATE_RUNNING)]
        assert pids[0].get_attr("PMM_A_START_TIME") == info.start_time_ns
        # exit and stop events
        grower.kill()
        grower.wait()
        drain(lambda: uapi.Cmd.EXITED in got, 10)
        exited = got[uapi.Cmd.EXITED][0]
        assert exited.get_attr("PMM_A_PID") == grower.pid
        assert exited.get_attr("PMM_A_STATE") == uapi.STATE_EXITED
        assert exited.get_attr("PMM_A_TIME") == dev.info(grower.pid).exit_time_ns
        dev.stop(grower.pid)
        drain(lambda: uapi.Cmd.STOPPED in got, 10)
        assert got[uapi.Cmd.STOPPED][0].get_attr("PMM_A_PID") == grower.pid
    finally:
        sock.close()
