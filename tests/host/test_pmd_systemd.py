"""pmd under systemd, checked without systemd as PID 1: the unit's security
exposure (`systemd-analyze security --offline=yes`) and `verify`, what
pmd's sandbox refuses (the unit's MemoryDenyWriteExecute= filter applied
here by hand; the system calls pmd makes against @system-service), the
/etc/default/pmd file, the sd_notify messages (pmm.daemon.sdnotify) on a real
AF_UNIX datagram socket, and the journal's "<N>" priority prefixes
(pmm.daemon.journal) when stderr is $JOURNAL_STREAM.

(The capabilities the unit grants, with the real module: tests/guest/test_pmd_caps.py.)
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmm.daemon import journal, sdnotify

TOP = Path(__file__).resolve().parents[2]
UNIT = TOP / "pmd" / "pmd.service"
DEFAULTS = TOP / "packaging" / "pmd.default"
MAX_EXPOSURE = 2.2  # what the unit scores now: a change may only lower it


def unit_settings() -> dict[str, list[str]]:
    """The unit's settings, each key's values in order."""
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_unit_security_exposure_does_not_rise() -> None:
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                        str(UNIT)], capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for pmd\.service: ([0-9.]+) (\w+)", r.stdout)
    assert m, r.stdout + r.stderr
    print(f"systemd-analyze security: {m.group(1)} {m.group(2)}")
    assert float(m.group(1)) <= MAX_EXPOSURE, r.stdout


def test_unit_verifies_clean(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: a copy of the unit
    # names pmd where this tree has it (/usr/bin/pmd is the package's)
    pmd = Path(sys.executable).parent / "pmd"
    assert os.access(pmd, os.X_OK), pmd
    unit = tmp_path / "pmd.service"
    text = UNIT.read_text()
    assert "ExecStart=/usr/bin/pmd " in text
    unit.write_text(text.replace("/usr/bin/pmd", str(pmd)))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr


def test_unit_runs_pmd_as_its_user_with_net_admin_alone() -> None:
    s = unit_settings()
    assert s["User"] == ["pmd"] and s["Group"] == ["pmm"]
    assert "DynamicUser" not in s  # /var/lib/private would hide the database from group pmm
    # the module's reader group, not CAP_SYS_PTRACE (which could write any process)
    assert s["SupplementaryGroups"] == ["pmm-readers"]
    assert "ProtectProc" not in s  # ptraceable would hide other users' /proc/PID
    caps = {"CAP_NET_ADMIN"}
    assert set(s["AmbientCapabilities"][0].split()) == caps
    assert set(s["CapabilityBoundingSet"][0].split()) == caps
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert s["EnvironmentFile"] == ["-/etc/default/pmd"]
    assert s["ExecStart"] == ["/usr/bin/pmd --db /var/lib/pmm/pmm.db $PMD_OPTS"]
    assert s["UMask"] == ["0027"] and s["StateDirectoryMode"] == ["0750"]
    assert s["RestrictAddressFamilies"] == ["AF_UNIX AF_NETLINK AF_INET AF_INET6"]
    assert s["SystemCallFilter"] == ["@system-service"]
    assert s["DevicePolicy"] == ["closed"] and s["DeviceAllow"] == ["/dev/pmm rw"]
    assert s["Documentation"] == ["file:///usr/share/doc/pmm-tools/README.md",
                                  "file:///usr/share/doc/pmm-tools/fleet.md"]


def test_unit_does_not_retry_usage_errors_and_bounds_files_and_tasks() -> None:
    s = unit_settings()
    # exit 1 (database) is retried; exit 2 (a usage error in PMD_OPTS) is not
    assert s["Restart"] == ["on-failure"] and s["RestartPreventExitStatus"] == ["2"]
    # 512 /proc/PID directories, 16 metrics connections and a few more files
    assert 512 + 16 + 64 <= int(s["LimitNOFILE"][0]) <= 4096
    # a handful of threads plus one per metrics connection
    assert 16 + 8 <= int(s["TasksMax"][0]) <= 128
    text = UNIT.read_text()
    assert "it listens to the module" not in text
    assert "whether\n# the module is loaded or not" in text


def test_udev_rule_restarts_pmd_when_the_device_appears() -> None:
    # DeviceAllow=/dev/pmm is resolved when pmd starts: a module loaded (or
    # reloaded, a new minor) later needs pmd restarted to open the device
    rules = (TOP / "packaging" / "60-pmm.rules").read_text()
    lines = [line for line in rules.splitlines() if line and not line.startswith("#")]
    assert lines == [
        'KERNEL=="pmm", SUBSYSTEM=="misc", OWNER="root", GROUP="root", MODE="0600"',
        'ACTION=="add", SUBSYSTEM=="misc", KERNEL=="pmm", '
        'RUN+="/bin/systemctl --no-block try-restart pmd.service"']
    # the installers' sed (s/GROUP="root", MODE="0600"/.../) matches the
    # permission line only
    assert rules.count('GROUP="root", MODE="0600"') == 1
    assert 'MODE="0660"' not in rules
    help_ = subprocess.run(["udevadm", "--help"], capture_output=True, text=True).stdout
    if re.search(r"^\s+verify\b", help_, re.M):  # systemd 254 or later
        r = subprocess.run(["udevadm", "verify", str(TOP / "packaging" / "60-pmm.rules")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def pmd_options() -> set[str]:
    r = subprocess.run([sys.executable, "-m", "pmd.main", "--help"], capture_output=True,
                       text=True, cwd=TOP, timeout=60, env=dict(os.environ, COLUMNS="200"))
    assert r.returncode == 0, r.stderr
    return set(re.findall(r"(--[a-z][a-z-]+)", r.stdout))


def test_defaults_file_documents_every_option_and_sets_pmd_opts() -> None:
    text = DEFAULTS.read_text()
    # what the unit's ExecStart fixes or a daemon has no use for
    not_for_the_unit = {"--db", "--pid", "--no-genl", "--version", "--help"}
    missing = sorted(o for o in pmd_options() - not_for_the_unit if o not in text)
    assert missing == [], f"packaging/pmd.default does not document {missing}"
    assignments = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert assignments == ['PMD_OPTS=""']
    # the examples are what systemd would read: VAR="value", one a line
    examples = [ln[1:] for ln in text.splitlines() if re.match(r"#[A-Z_]+=", ln)]
    assert '#PMD_OPTS="--metrics 127.0.0.1:9466"' in text
    for ex in examples:
        assert re.fullmatch(r'[A-Z_]+="[^"$`\\]*"', ex), ex
    # what --metrics on localhost or another address lets others read
    said = " ".join(ln.lstrip("# ") for ln in text.splitlines())
    assert "every local user can read /metrics" in said
    assert "the process's owner and --pprof-allow-user users" in said
    assert "Any other address exposes /metrics to the network" in said


# -- the sandbox: what the unit's seccomp filters refuse ---------------------

# systemd's MemoryDenyWriteExecute= filter (seccomp-util.c), for x86-64:
# mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect adding PROT_EXEC,
# shmat with SHM_EXEC fail with EPERM
MDWE_HELPER = textwrap.dedent("""
    import ctypes, os, sys
    LD, JEQ, AND, RET = 0x20, 0x15, 0x54, 0x06
    ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1
    ARG2 = 16 + 2 * 8  # seccomp_data.args[2], low 32 bits
    prog = [
        (LD, 0, 0, 4), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, ALLOW),
        (LD, 0, 0, 0), (JEQ, 4, 0, 9), (JEQ, 8, 0, 10), (JEQ, 7, 0, 329),
        (JEQ, 11, 0, 30), (RET, 0, 0, ALLOW),
        (LD, 0, 0, ARG2), (AND, 0, 0, 6), (JEQ, 0, 1, 6), (RET, 0, 0, EPERM),
        (RET, 0, 0, ALLOW),
        (LD, 0, 0, ARG2), (AND, 0, 0, 4), (JEQ, 0, 1, 4), (RET, 0, 0, EPERM),
        (RET, 0, 0, ALLOW),
        (LD, 0, 0, ARG2), (AND, 0, 0, 0o100000), (JEQ, 0, 1, 0o100000),
        (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW),
    ]
    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                    ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]
    insns = (Insn * len(prog))(*[Insn(*i) for i in prog])
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) or libc.prctl(
            PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
            ctypes.cast(ctypes.pointer(Prog(len(prog), insns)), ctypes.c_void_p), 0, 0):
        sys.exit(f"seccomp: {os.strerror(ctypes.get_errno())}")
    os.execv(sys.argv[1], sys.argv[1:])
""")

# Runs under the filter: the filter refuses a W+X mapping (so it is in
# force), and what pmd loads works: ctypes structures and ioctl buffers,
# pyroute2's netlink sockets, prometheus_client, sqlite3.
MDWE_PROBE = textwrap.dedent("""
    import ctypes, mmap, sqlite3
    try:
        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        print("wx-mapping allowed")
    except PermissionError:
        print("wx-mapping refused")
    import prometheus_client, pyroute2
    from pmm.kernel import device, genl, uapi
    c = uapi.Config()
    c.size = ctypes.sizeof(c)
    print("config", c.size > 0)
    listener = genl.Listener()
    listener.connect()  # no module here: refused, but the socket is made
    listener.close()
    sqlite3.connect(":memory:").execute("select 1").fetchone()
    # a ctypes callback needs a trampoline: libffi's static ones need no W+X page
    cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                           ctypes.POINTER(ctypes.c_int))(lambda a, b: a[0] - b[0])
    arr = (ctypes.c_int * 3)(3, 1, 2)
    libc = ctypes.CDLL(None)
    libc.qsort(arr, 3, ctypes.sizeof(ctypes.c_int), cmp)
    print("callback", list(arr))
""")


def mdwe(tmp_path: Path, *argv: str) -> list[str]:
    helper = tmp_path / "mdwe.py"
    helper.write_text(MDWE_HELPER)
    return [sys.executable, str(helper), sys.executable, *argv]


def test_python_and_pmds_libraries_work_without_writable_code(tmp_path: Path) -> None:
    assert platform.machine() == "x86_64"  # the filter's system call numbers
    r = subprocess.run(mdwe(tmp_path, "-c", MDWE_PROBE), capture_output=True, text=True,
                       cwd=TOP, timeout=60, env=dict(os.environ, PYTHONPATH=str(TOP / "src")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["wx-mapping refused", "config True", "callback [1, 2, 3]"]


def wait_for_samples(db: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                n = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        except sqlite3.Error:
            n = 0
        if n >= 2:
            return n
        time.sleep(0.2)
    return n


def test_pmd_records_without_writable_code(tmp_path: Path,
                                           sleeper: subprocess.Popen[bytes]) -> None:
    db = tmp_path / "pmm.db"
    p = subprocess.Popen(mdwe(tmp_path, "-m", "pmd.main", "--db", str(db), "--pid",
                              str(sleeper.pid), "--interval", "100ms", "--commit-interval",
                              "200ms"), cwd=TOP, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_samples(db, 30) >= 2
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def syscall_group(name: str, seen: set[str] | None = None) -> set[str]:
    """The system calls of a systemd system call group, nested groups expanded."""
    seen = set() if seen is None else seen
    seen.add(name)
    r = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                       text=True, check=True, timeout=60)
    calls: set[str] = set()
    for line in r.stdout.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if word.startswith("@"):
            if word not in seen:
                calls |= syscall_group(word, seen)
        else:
            calls.add(word)
    return calls


def test_pmd_calls_only_system_service_calls(tmp_path: Path,
                                             sleeper: subprocess.Popen[bytes]) -> None:
    # strace sees every system call of pmd's process and threads: the module's
    # netlink family (absent here: its socket is opened and refused), /proc,
    # SQLite, the detector's imports and thread
    trace, db = tmp_path / "trace", tmp_path / "pmm.db"
    p = subprocess.Popen(["strace", "-f", "-qq", "-o", str(trace), sys.executable, "-m",
                          "pmd.main", "--db", str(db), "--pid", str(sleeper.pid), "--interval",
                          "100ms", "--commit-interval", "200ms", "--detect-every", "1"],
                         cwd=TOP, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_samples(db, 60) >= 2
    finally:
        children = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        for child in children:
            os.kill(int(child), signal.SIGTERM)
        p.wait(timeout=60)
    names = set(re.findall(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", trace.read_text(),
                           re.MULTILINE))
    names -= {"exit", "exit_group", "execve", "rt_sigreturn"}  # strace's own view of these
    assert {"socket", "bind", "ioctl", "openat", "pwrite64"} & names  # it traced pmd
    outside = sorted(names - syscall_group("@system-service"))
    assert outside == [], f"pmd makes system calls SystemCallFilter=@system-service refuses: " \
                          f"{outside}"


# -- sd_notify ---------------------------------------------------------------

@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket where systemd would listen, named in $NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        name = str(tmp_path / "notify")
        sock.bind(name)
    else:
        abstract = f"pmm-test-notify-{os.getpid()}-{time.monotonic_ns()}"
        sock.bind(b"\0" + abstract.encode())
        name = "@" + abstract
    sock.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", name)
    yield sock
    sock.close()


def test_sdnotify_sends_ready_status_stopping(notify_socket: socket.socket) -> None:
    assert sdnotify.ready("3 processes, module connected")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=3 processes, module connected"
    assert sdnotify.status("4 processes\nforged=1")
    assert notify_socket.recv(4096) == b"STATUS=4 processes forged=1"
    assert sdnotify.stopping()
    assert notify_socket.recv(4096) == b"STOPPING=1"
    assert sdnotify.ready()
    assert notify_socket.recv(4096) == b"READY=1"


def test_sdnotify_from_another_process(notify_socket: socket.socket) -> None:
    r = subprocess.run([sys.executable, "-c", "from pmm.daemon import sdnotify; "
                        "print(sdnotify.notify('STATUS=from a child'))"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout == "True\n", r.stderr
    assert notify_socket.recv(4096) == b"STATUS=from a child"


def test_sdnotify_without_systemd_is_a_silent_no_op(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.ready("x") is False
    assert sdnotify.status("x") is False
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert sdnotify.stopping() is False
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/name")
    assert sdnotify.ready() is False


def test_pmd_notifies_ready_status_and_stopping(tmp_path: Path,
                                                sleeper: subprocess.Popen[bytes]) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(10)
    p = subprocess.Popen([sys.executable, "-m", "pmd.main", "--no-genl", "--db",
                          str(tmp_path / "pmm.db"), "--pid", str(sleeper.pid), "--interval",
                          "100ms"], cwd=TOP, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify")))
    try:
        first = sock.recv(4096).decode()
        assert first.startswith("READY=1\nSTATUS="), first
        status = sock.recv(4096).decode()
        assert re.fullmatch(r"STATUS=\d+ process(es)?, \d+ leaking; module not connected; "
                            r"\d+ samples written", status), status
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    messages = []
    with pytest.raises(TimeoutError):
        sock.settimeout(1)
        while True:
            messages.append(sock.recv(4096).decode())
    assert "STOPPING=1" in messages
    sock.close()


# -- journal priorities ------------------------------------------------------

LOGGING_PROGRAM = textwrap.dedent("""
    import logging
    from pmd.main import setup_logging
    setup_logging(verbose=True)  # pmd's own choice of format, at DEBUG
    log = logging.getLogger("pmd")
    log.debug("debug line")
    log.info("info line")
    log.warning("LEAK pid 42 (leaker\\x1b[31m)")
    log.error("error line")
    log.critical("critical line")
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("failed")
""")


def run_logging(tmp_path: Path, journal_stream: str | None) -> list[str]:
    out = tmp_path / "stderr"
    with open(out, "w") as f:
        st = os.fstat(f.fileno())
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        if journal_stream == "mine":
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        elif journal_stream is not None:
            env["JOURNAL_STREAM"] = journal_stream
        subprocess.run([sys.executable, "-c", LOGGING_PROGRAM], stderr=f, env=env, check=True,
                       timeout=60)
    return out.read_text().splitlines()


def test_journal_stream_gets_syslog_priorities(tmp_path: Path) -> None:
    lines = run_logging(tmp_path, "mine")
    assert lines[:5] == [
        "<7>pmd: DEBUG: debug line",
        "<6>pmd: INFO: info line",
        "<4>pmd: WARNING: LEAK pid 42 (leaker\\x1b[31m)",
        "<3>pmd: ERROR: error line",
        "<2>pmd: CRITICAL: critical line",
    ]
    # a traceback stays on its record's line, so it keeps the priority
    assert len(lines) == 6 and lines[5].startswith("<3>pmd: ERROR: failed Traceback")
    assert "ZeroDivisionError" in lines[5]


@pytest.mark.parametrize("stream", [None, "1:2", "garbage", ""])
def test_other_stderr_keeps_the_plain_format(tmp_path: Path, stream: str | None) -> None:
    # no $JOURNAL_STREAM, or one naming another file (stderr redirected)
    lines = run_logging(tmp_path, stream)
    # each after its local time: the journal is not there to stamp it
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} "
    for line, want in zip(lines, ["pmd: DEBUG: debug line", "pmd: INFO: info line",
                                  "pmd: WARNING: LEAK pid 42 (leaker\\x1b[31m)"], strict=False):
        assert re.fullmatch(stamp + re.escape(want), line), line
    assert len(lines) >= 3


def test_syslog_priority_of_each_level() -> None:
    assert [journal.syslog_priority(n) for n in (5, 10, 15, 20, 25, 30, 40, 50, 60)] == \
        [7, 7, 7, 6, 6, 4, 3, 2, 2]


def test_pmd_logs_with_priorities_to_the_journal_stream(tmp_path: Path,
                                                        sleeper: subprocess.Popen[bytes]) -> None:
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        st = os.fstat(f.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        p = subprocess.Popen([sys.executable, "-m", "pmd.main", "--no-genl", "--db",
                              str(tmp_path / "pmm.db"), "--pid", str(sleeper.pid), "--pid",
                              "999999999"], cwd=TOP, stderr=f, env=env)
        p.wait(timeout=60)
    # pmd's one-line refusal to start is an error too
    lines = err.read_text().splitlines()
    assert lines == ["<3>pmd: no such process: pid 999999999"], lines
    with open(err, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "pmd.main", "--no-genl", "--db",
                              str(tmp_path / "pmm.db"), "--pid", str(sleeper.pid)],
                             cwd=TOP, stderr=f, env=env)
        try:
            assert wait_for_samples(tmp_path / "pmm.db", 30) >= 2
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
    lines = err.read_text().splitlines()
    assert lines and all(ln.startswith("<6>pmd: INFO: ") for ln in lines), lines
    assert any("pmd running" in ln for ln in lines)
    print(shlex.join(lines))
