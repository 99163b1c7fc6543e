"""The genl event decoder (src/pmm/kernel/genl.py) on hand-built datagrams laid out as
kmod/genl.c sends them, and the daemon's handling of a malformed one."""

from __future__ import annotations

import logging
import random
import struct
from pathlib import Path

import pytest

from pmm.daemon import Daemon, Options
from pmm.kernel import uapi
from pmm.kernel.genl import (
    Event,
    MalformedEvent,
    PmmMsg,
    SiteLive,
    _event,
    check_attrs,
    decode_datagram,
    parse_message,
)
from pmm.store import Store, start_key

FAM = 0x1B  # any dynamic genl family id
A = uapi.Attr
NLA_F_NESTED = 0x8000


def attr(t: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, t) + payload + b"\0" * (-n % 4)


def u32(t: int, v: int) -> bytes:
    return attr(t, struct.pack("=I", v))


def u64(t: int, v: int) -> bytes:
    # nla_put_u64_64bit: a PAD attribute first when the payload is not 8-aligned
    return attr(A.PAD, b"") + attr(t, struct.pack("=Q", v))


def msg(cmd: int, *attrs: bytes, typ: int = FAM) -> bytes:
    body = struct.pack("=BBH", cmd, uapi.GENL_VERSION, 0) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), typ, 0, 0, 0) + body


def sample_msg(pid: int = 42, rss: int = 8192) -> bytes:
    return msg(uapi.Cmd.SAMPLE, u32(A.PID, pid), u64(A.START_TIME, 123_456_789_012),
               u64(A.TIME, 200_000_000_000), u64(A.VM, 1 << 30), u64(A.RSS, rss),
               u64(A.RSS_ANON, 4096), u64(A.RSS_FILE, 4096), u64(A.RSS_SHMEM, 0),
               u64(A.LIVE_BYTES, 300), u64(A.LIVE_BLOCKS, 3))


def test_sample_event() -> None:
    (ev,) = decode_datagram(sample_msg(), FAM)
    assert ev == Event(cmd=uapi.Cmd.SAMPLE, pid=42, start_time=123_456_789_012,
                       time=200_000_000_000, vm=1 << 30, rss=8192, rss_anon=4096,
                       rss_file=4096, rss_shmem=0, live_bytes=300, live_blocks=3)


def heap_msg(pid: int, allocator: int, free: int, top: int, cgroup: int | None) -> bytes:
    """A SAMPLE as kmod/genl.c sends it after a heap report (and, with
    cgroup, for a process in a memory cgroup)."""
    extra = [u32(A.ALLOCATOR, allocator), u64(A.HEAP_TIME, 199_000_000_000),
             u64(A.HEAP_MAPPED, 5 << 20), u64(A.HEAP_IN_USE, (5 << 20) - free),
             u64(A.HEAP_FREE, free), u64(A.HEAP_TOP, top), u64(A.HEAP_RETAINED, 0)]
    if cgroup is not None:
        extra.append(u64(A.CGROUP_USAGE, cgroup))
    return msg(
        uapi.Cmd.SAMPLE, u32(A.PID, pid), u64(A.START_TIME, 123_456_789_012),
        u64(A.TIME, 200_000_000_000), u64(A.VM, 1 << 30), u64(A.RSS, 8192),
        u64(A.RSS_ANON, 4096), u64(A.RSS_FILE, 4096), u64(A.RSS_SHMEM, 0),
        u64(A.LIVE_BYTES, 300), u64(A.LIVE_BLOCKS, 3), *extra)


def test_sample_event_with_heap_and_cgroup() -> None:
    """The allocator's report and the cgroup's usage decode (both decoders) to
    the model's figures: glibc's trimmable is the top chunk, jemalloc has none,
    a sample without a report has none at all."""
    glibc, jemalloc = heap_msg(42, uapi.ALLOC_GLIBC, 3 << 20, 1 << 16, 9 << 20), \
        heap_msg(43, uapi.ALLOC_JEMALLOC, 2 << 20, 0, None)
    evs = decode_datagram(glibc + jemalloc + sample_msg(44), FAM)
    assert [e if isinstance(e, MalformedEvent) else _via_pyroute2(m)
            for e, m in zip(evs, (glibc, jemalloc, sample_msg(44)), strict=True)] == evs
    g, j, none = evs
    assert isinstance(g, Event) and isinstance(j, Event) and isinstance(none, Event)
    assert (g.allocator, g.heap_free, g.heap_top, g.heap_mapped, g.heap_in_use, g.heap_time,
            g.cgroup_usage) == (uapi.ALLOC_GLIBC, 3 << 20, 1 << 16, 5 << 20, 2 << 20,
                                199_000_000_000, 9 << 20)
    assert g.heap_figures() == (3 << 20, 1 << 16, "glibc")
    assert j.heap_figures() == (2 << 20, None, "jemalloc") and j.cgroup_usage is None
    assert none.heap_figures() == (None, None, None) and none.cgroup_usage is None


def test_daemon_stores_heap_and_cgroup_figures(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False))
    for ev in decode_datagram(heap_msg(42, uapi.ALLOC_GLIBC, 3 << 20, 1 << 16, 9 << 20), FAM):
        d.handle_event(ev)
    d.flush_now()
    (row,) = st.sample_rows(42, start_key(123_456_789_012))
    assert (row.live_bytes, row.live_blocks, row.heap_free, row.heap_trimmable, row.allocator,
            row.cgroup_usage) == (300, 3, 3 << 20, 1 << 16, "glibc", 9 << 20)
    st.close()


def test_exited_and_sites_events() -> None:
    exited = msg(uapi.Cmd.EXITED, u32(A.PID, 7), u64(A.START_TIME, 5), u64(A.TIME, 9),
                 attr(A.COMM, b"leaky\0"), u32(A.STATE, 2))

    def site(sid: int, b: int, k: int) -> bytes:
        return attr(A.SITE | NLA_F_NESTED,
                    u32(A.SITE_ID, sid) + u64(A.LIVE_BYTES, b) + u64(A.LIVE_BLOCKS, k))

    sites = msg(uapi.Cmd.SITES, u32(A.PID, 7), u64(A.START_TIME, 5), u64(A.TIME, 10),
                site(3, 4096, 2), site(9, 100, 1))
    evs = decode_datagram(exited + sites, FAM)
    assert evs == [
        Event(cmd=uapi.Cmd.EXITED, pid=7, start_time=5, time=9, comm="leaky", state=2),
        Event(cmd=uapi.Cmd.SITES, pid=7, start_time=5, time=10,
              sites=(SiteLive(3, 4096, 2), SiteLive(9, 100, 1))),
    ]


@pytest.mark.parametrize(
    "bad, why",
    [
        (msg(uapi.Cmd.SAMPLE, u64(A.START_TIME, 1), u64(A.TIME, 1), u64(A.VM, 1),
             u64(A.RSS, 1)), "no valid PMM_A_PID"),
        (msg(uapi.Cmd.SAMPLE, u32(A.PID, 1), u64(A.START_TIME, 1), u64(A.TIME, 1)),
         "missing PMM_A_VM, PMM_A_RSS"),
        (msg(uapi.Cmd.SAMPLE, u32(A.PID, 1), attr(A.START_TIME, b"\1\2\3"),
             u64(A.TIME, 1), u64(A.VM, 1), u64(A.RSS, 1)), "START_TIME"),
        (msg(99, u32(A.PID, 1)), "unknown command 99"),
        (msg(uapi.Cmd.EXITED, u32(A.PID, 1), u64(A.START_TIME, 1), attr(A.COMM, b"\xff\xfe")),
         ""),
        (sample_msg()[:40], "truncated netlink message"),
        (sample_msg()[:-8], "truncated"),
        (msg(uapi.Cmd.SAMPLE, u32(A.PID, 1), typ=FAM + 1), "unexpected type"),
        (msg(uapi.Cmd.SAMPLE, u32(A.PID, 1), struct.pack("=HH", 200, A.RSS)), ""),
    ],
)
def test_malformed(bad: bytes, why: str) -> None:
    out = decode_datagram(bad, FAM)
    assert out and all(isinstance(e, MalformedEvent) for e in out), out
    assert why in str(out[0])


def test_bad_message_does_not_hide_the_next() -> None:
    bad = msg(uapi.Cmd.SAMPLE, u32(A.PID, 1))
    out = decode_datagram(bad + sample_msg(pid=43), FAM)
    assert isinstance(out[0], MalformedEvent)
    assert isinstance(out[1], Event) and out[1].pid == 43


def test_daemon_logs_and_skips_malformed(tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False))
    caplog.set_level(logging.INFO, logger="pmd")
    for ev in decode_datagram(msg(uapi.Cmd.SAMPLE, u32(A.PID, 1)) + sample_msg(rss=12288), FAM):
        d.handle_event(ev)
    d.flush_now()
    assert d.events.malformed == 1
    warn = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warn == ["malformed event skipped: command 1 (pid 1): missing PMM_A_START_TIME, "
                    "PMM_A_TIME, PMM_A_VM, PMM_A_RSS"]
    s = st.series(42, start_key(123_456_789_012))
    assert s.rss.tolist() == [12288] and s.time_ns.tolist() == [200_000_000_000]
    row = st.db.conn.execute("SELECT live_bytes, live_blocks, source FROM samples").fetchone()
    assert row == (300, 3, "kmod")
    st.close()


def test_daemon_alerts_once_on_leak(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=10))
    d.detector.ready.set()  # run() would warm the detector up in a thread first
    caplog.set_level(logging.INFO, logger="pmd")
    pid, start = 4_000_001, 5_000_000_000
    sites = []
    for i in range(200):
        t = 10_000_000_000 + i * 100_000_000
        d.handle_event(Event(cmd=uapi.Cmd.SAMPLE, pid=pid, start_time=start, time=t,
                             vm=1 << 30, rss=(2 << 20) + 4096 * i))
        if i % 10 == 0:
            sites.append(Event(cmd=uapi.Cmd.SITES, pid=pid, start_time=start, time=t,
                               sites=(SiteLive(5, 4096 * i, i), SiteLive(6, 100, 1))))
            d.handle_event(sites[-1])
    d.flush_now()
    # one line per LEAK: the alert's, at warning, and no info line besides it
    assert [ln for ln in caplog.messages if ln.startswith(f"pid {pid}")] == []
    alerts = st.alerts(pid)
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.verdict, a.site, a.start_time) == ("LEAK", 5, start)
    assert a.slope == pytest.approx(40960.0)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if str(pid) in r.getMessage()]
    assert lines == [("WARNING", a.message)]
    assert a.message.startswith(f"LEAK pid {pid} (?): rss +2.3 MiB/min [95% CI +")
    assert "fastest site 5 +2.3 MiB/min" in a.message
    # a restarted pmd does not alert again for the same process
    d2 = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=10))
    d2.detector.ready.set()
    for i in range(200, 260):
        d2.handle_event(Event(cmd=uapi.Cmd.SAMPLE, pid=pid, start_time=start,
                              time=10_000_000_000 + i * 100_000_000, vm=1 << 30,
                              rss=(2 << 20) + 4096 * i))
    d2.flush_now()
    assert len(st.alerts(pid)) == 1
    st.close()


def test_alert_names_the_largest_site_before_growth_is_known(tmp_path: Path) -> None:
    st = Store.open(tmp_path / "pmm.db")
    d = Daemon(st, Options(db=tmp_path / "pmm.db", pids=[], genl=False, detect_every=30))
    d.detector.ready.set()
    pid, start = 4_000_002, 7_000_000_000
    for i in range(30):
        t = 10_000_000_000 + i * 100_000_000
        if i == 10:  # one SITES event (the module sends one every 10 samples)
            d.handle_event(Event(cmd=uapi.Cmd.SITES, pid=pid, start_time=start, time=t,
                                 sites=(SiteLive(8, 900, 3), SiteLive(5, 40960, 10))))
        d.handle_event(Event(cmd=uapi.Cmd.SAMPLE, pid=pid, start_time=start, time=t,
                             vm=1 << 30, rss=(2 << 20) + 65536 * i))
    (a,) = st.alerts(pid)
    assert a.site == 5
    assert a.message.endswith("; largest site 5 40.0 KiB live")
    st.close()


def _via_pyroute2(m: bytes) -> Event | str:
    """The reference reading: the policy check, pyroute2's PmmMsg, and its
    attributes made an Event by genl's own rules (_event)."""
    known = {f"PMM_A_{a.name}": a.name.lower() for a in A
             if a not in (A.UNSPEC, A.SITE, A.SITE_ID, A.PAD)}
    try:
        check_attrs(m, 20, len(m))
        pm = PmmMsg(m)
        pm.decode()
        cmd = pm.get("cmd")
        if cmd not in [*uapi.Cmd]:
            return "malformed"
        values: dict[str, object] = {}
        sites = []
        for name, value, *_ in pm.get("attrs", ()):
            if name == "PMM_A_SITE":
                sid, lb = value.get_attr("PMM_A_SITE_ID"), value.get_attr("PMM_A_LIVE_BYTES")
                if not isinstance(sid, int) or not isinstance(lb, int):
                    return "malformed"
                sites.append(SiteLive(sid, lb, value.get_attr("PMM_A_LIVE_BLOCKS", 0)))
            elif name in known:
                values[known[name]] = value
        return _event(cmd, values, sites)
    except MalformedEvent:
        return "malformed"
    except Exception:  # noqa: BLE001 - pyroute2 raises many kinds on bad input
        return "malformed"


def _via_parser(m: bytes) -> Event | str:
    try:
        return parse_message(m)
    except MalformedEvent:
        return "malformed"


def test_a_dumps_replies_are_read_by_the_one_parser() -> None:
    """dump_pids's replies come parsed by pyroute2, several to a datagram:
    from_pyroute2 reads each one's own bytes with parse_message."""
    from pyroute2.netlink.marshal import Marshal

    from pmm.kernel.genl import from_pyroute2

    first, second = msg(uapi.Cmd.GET_PIDS, u32(A.PID, 7), u64(A.START_TIME, 5)), \
        sample_msg(pid=8)
    marshal = Marshal()
    marshal.msg_map = {FAM: PmmMsg}
    got = [from_pyroute2(m) for m in marshal.parse(first + second)]
    assert got == [parse_message(first), parse_message(second)]
    assert [e.pid for e in got] == [7, 8]


def test_one_pass_parser_matches_pyroute2() -> None:
    # random messages, mostly well formed, some not: both decoders agree on
    # every one (same Event, or both refuse it)
    r = random.Random(5)
    ints = [a for a in A if a not in (A.UNSPEC, A.SITE, A.COMM, A.PAD)]
    agreed = {"event": 0, "malformed": 0}
    for _ in range(3000):
        parts = []
        for a in r.sample(ints, r.randint(0, len(ints))):
            wide = a not in (A.PID, A.STATE, A.PPID, A.SITE_ID, A.ALLOCATOR)
            v = r.choice([0, 1, 42, 2**31, r.getrandbits(32)])
            if wide:
                v = r.choice([v, r.getrandbits(64)])
            if a in (A.START_TIME, A.TIME) and v >> 63 and r.random() < 0.8:
                v >>= 1  # mostly valid keys (beyond 2^63-1 a message is malformed)
            p = struct.pack("=Q" if wide else "=I", v)
            if r.random() < 0.015:
                p = p[:-1]  # a short attribute
            parts.append(attr(A.PAD, b"") + attr(a, p) if wide else attr(a, p))
        if r.random() < 0.3:
            name = r.choice([b"sleep", b"a" * 15, "d\u00e9mon".encode(), b""])
            parts.append(attr(A.COMM, name + (b"\0" if r.random() > 0.05 else b"")))
        for _ in range(r.choice([0, 0, 1, 3])):
            inner = [u32(A.SITE_ID, r.getrandbits(32)), u64(A.LIVE_BYTES, r.getrandbits(40))]
            if r.random() < 0.5:
                inner.append(u64(A.LIVE_BLOCKS, r.getrandbits(20)))
            if r.random() < 0.05:
                inner.pop(r.randrange(len(inner)))
            parts.append(attr(A.SITE | NLA_F_NESTED, b"".join(r.sample(inner, len(inner)))))
        if r.random() < 0.05:
            parts.append(attr(99, b"\1\2\3"))  # from a newer module: ignored
        r.shuffle(parts)
        cmd = r.choice(list(uapi.Cmd) + [77])
        m = msg(cmd, *parts)
        want = _via_pyroute2(m)
        assert _via_parser(m) == want, m.hex()
        agreed["malformed" if want == "malformed" else "event"] += 1
    assert min(agreed.values()) > 300, agreed  # both kinds were exercised
