"""pmm-inject on the host: the hook loaded into a running program that was
not started with it (the fake-device build, whose calls are logged), and
every refusal. The program's output must be a bare run's."""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from as_user import as_user
from hook_env import clean_env, fake_log_batches, fake_log_calls

from pmm.kernel import uapi
from pmm.run import children_of

TOP = Path(__file__).resolve().parents[2]
INJECT = TOP / "hooklib" / "pmm-inject"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
BIN = TOP / "tests" / "progs" / "bin"
ATTACHEE = BIN / "attachee"
NOBODY = 65534

# exit codes of pmm-inject (hooklib/inject/inject.c)
EXIT_USAGE, EXIT_NO_PROCESS, EXIT_PERMISSION, EXIT_TRACED = 2, 3, 4, 5
EXIT_NOT_DYNAMIC, EXIT_NO_LIBRARY, EXIT_SECCOMP, EXIT_NO_SAFE_POINT = 6, 7, 8, 9
EXIT_ATTACH_FAILED = 11


class Running:
    """attachee started bare, waiting at its round 0 for a line on stdin (so
    that whatever the test does to it comes before its rounds); its pid once
    it printed 'ready PID'."""

    def __init__(self, args: list[str], argv: list[str] | None = None,
                 env: dict[str, str] | None = None, exe: Path = ATTACHEE) -> None:
        self.proc = subprocess.Popen(argv or [str(exe), *args, "wait", "0"],
                                     env=env or clean_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("ready "), line
        self.pid = int(line.split()[1])

    def reached(self, line: str) -> None:
        """Waits for the program's next line, which says where it waits: an
        attach before it gets there would find it elsewhere."""
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().decode() == line

    def finish(self) -> tuple[int, str, str]:
        """Lets it go on, and waits for its end."""
        out, err = self.proc.communicate(b"go\n", timeout=120)
        return self.proc.returncode, out.decode(), err.decode()


def bare(args: list[str], env: dict[str, str] | None = None, exe: Path = ATTACHEE) -> str:
    r = subprocess.run([str(exe), *args, "wait", "0"], env=env or clean_env(), input="go\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.split("\n", 1)[1]  # without "ready PID"


def inject(pid: int, *settings: str, lib: Path = FAKE,
           extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(INJECT), "--lib", str(lib), *(extra or []), str(pid),
                           *settings], capture_output=True, text=True, timeout=60)


def records(log: Path) -> list[uapi.Record]:
    return [rec for _, rs in fake_log_batches(log) for rec in rs]


def attached_as_bare(tmp_path: Path, args: list[str], *settings: str,
                     env: dict[str, str] | None = None, exe: Path = ATTACHEE) -> Path:
    """args run bare, then again attached before its rounds (PMM_START=1 and
    settings): the same output and status. The fake device's log."""
    want = bare(args, env, exe)
    log = tmp_path / "log"
    run = Running(args, env=env, exe=exe)
    r = inject(run.pid, "PMM_START=1", *settings, f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"attached to {run.pid}: ")
    code, out, err = run.finish()
    assert (code, out, err) == (0, want, "")
    return log


def ops(log: Path) -> collections.Counter[tuple[int, int]]:
    """(op, flags) -> events (weights summed) of every record logged."""
    c: collections.Counter[tuple[int, int]] = collections.Counter()
    for _, recs in fake_log_batches(log):
        for r in recs:
            c[(r.op, r.flags)] += r.weight
    return c


def test_attach_exact_records_and_the_program_runs_as_bare(tmp_path: Path) -> None:
    """40 rounds, each blocked in epoll_wait, nanosleep, poll, a condition
    variable or usleep, with 3 threads hammering malloc: attached before its
    rounds (the threads run already), it prints what a bare run prints (no
    EINTR, no short sleep, the same sums), and its allocations are recorded,
    by all 4 threads, through libc's own calls too (strdup)."""
    args = ["40", "threads", "3"]
    want = bare(args)
    log = tmp_path / "log"
    run = Running(args)
    r = inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"attached to {run.pid}: ")
    code, out, err = run.finish()
    assert (code, err) == (0, "")
    assert out == want
    assert "short_sleeps 0" in want
    c = ops(log)
    mallocs = sum(n for (op, _), n in c.items() if op == uapi.Op.MALLOC)
    reallocs = sum(n for (op, _), n in c.items() if op == uapi.Op.REALLOC)
    # each round: 2000 malloc, 2000 strdup, 2000 realloc
    assert mallocs >= 4000 * 40 and reallocs >= 2000 * 40
    # blocks the threads allocated before the attach are freed after it:
    # frees of blocks older than monitoring, flagged so
    assert c[(uapi.Op.FREE, uapi.REC_F_OLDER)] > 0
    tids = {call.tid for call in fake_log_calls(log) if call.records}
    assert len(tids) == 4


def test_frees_of_blocks_older_than_the_attach(tmp_path: Path) -> None:
    """3000 blocks allocated before the attach: after it, 1500 are freed
    and 1500 grown by realloc (then freed). Each free and realloc of an
    older block is sent flagged PMM_REC_F_OLDER (the module counts it and
    does no table work), each free of a block allocated since is not: the
    grown blocks' frees are sent as ordinary frees, or cancel in the
    buffer."""
    args = ["3", "older", "3000"]
    log = attached_as_bare(tmp_path, args)
    recs = records(log)
    older = collections.Counter(rec.op for rec in recs if rec.flags & uapi.REC_F_OLDER)
    # and the array that held them
    assert older == {uapi.Op.FREE: 1500 + 1, uapi.Op.REALLOC: 1500}
    grown = [rec for rec in recs if rec.op == uapi.Op.REALLOC and rec.size >= 5000]
    assert len(grown) == 1500
    frees = {rec.ptr: rec.flags for rec in recs if rec.op == uapi.Op.FREE}
    # each freed at the end: cancelled in the buffer (FREED) or sent, never
    # as older (tagged, or untagged where its tag slot was taken since)
    assert all(rec.flags & uapi.REC_F_FREED or frees[rec.ptr] in (0, uapi.REC_F_TAGGED)
               for rec in grown)


def test_signals_during_the_attach_keep_their_siginfo(tmp_path: Path) -> None:
    """SIGRTMIN sent by sigqueue (value 42) every 100 us while pmm-inject
    works on the program's only thread: the thread blocks every signal
    during the calls, so those that come meanwhile wait in the kernel and
    arrive after, each once and as sent (a signal held and sent again with
    tgkill would come as SI_TKILL without its value)."""
    import threading
    import time

    libc = ctypes.CDLL(None, use_errno=True)

    class Sigval(ctypes.Union):
        _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]

    libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, Sigval]
    rtmin = int(signal.SIGRTMIN)
    args = ["2", "sigqueue"]
    want = bare(args)
    log = tmp_path / "log"
    run = Running(args)
    sent = 0
    stop = threading.Event()

    def flood() -> None:
        nonlocal sent
        while not stop.is_set():
            assert libc.sigqueue(run.pid, rtmin, Sigval(42)) == 0, ctypes.get_errno()
            sent += 1
            time.sleep(0.0001)

    sender = threading.Thread(target=flood)
    sender.start()
    try:
        time.sleep(0.02)
        r = inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}")
        time.sleep(0.02)
    finally:
        stop.set()
        sender.join()
    assert r.returncode == 0, r.stderr
    code, out, err = run.finish()
    assert (code, err) == (0, "")
    total, signals = out.splitlines()
    assert total == want.strip()
    assert signals == f"signals queued {sent} other 0"


def test_a_non_pie_program_that_takes_mallocs_address(tmp_path: Path) -> None:
    """A non-PIE executable that calls malloc and free through pointers it
    took: its PLT entries stand for them (the symbols' values there), libc's
    strdup reaches the definitions. Every entry is redirected, so each block
    recorded is freed where the hook sees it: no free passes it by (a block
    would stay live in the module for ever), and the program's own blocks
    are recorded too."""
    log = attached_as_bare(tmp_path, ["3", "via-pointers"], exe=BIN / "attachee-nopie")
    live: dict[int, int] = {}
    allocs = 0
    for rec in records(log):
        if rec.op in (uapi.Op.MALLOC, uapi.Op.REALLOC) and rec.ptr:
            allocs += rec.weight
            live.pop(rec.prev_ptr, None)
            if not rec.flags & uapi.REC_F_FREED:
                live[rec.ptr] = rec.size
        elif rec.op == uapi.Op.FREE:
            live.pop(rec.ptr, None)
    assert allocs >= 3 * 2000 * 2  # malloc (through the pointer) and strdup
    assert not {p: s for p, s in live.items() if s in (9, *range(400, 500))}


def test_the_programs_fault_handlers_are_kept(tmp_path: Path) -> None:
    """A program with a SIGSEGV handler (a JVM's, a crash reporter's): the
    calls end with a fault at address 0, which must not reach the kernel as
    a blocked SIGSEGV (forced through, it resets the handler to SIG_DFL)."""
    log = attached_as_bare(tmp_path, ["2", "segv-handler"])
    assert records(log)
    assert "SIGSEGV handler kept" in bare(["2", "segv-handler"])


def test_a_thread_on_a_small_stack_is_not_a_safe_point() -> None:
    """The only thread waits on a 32 KiB stack of its own (makecontext):
    dlopen and pmm_attach could run off its end, so it is never chosen; no
    safe point comes (exit 9) and the program runs on as bare."""
    args = ["2", "small-stack"]
    want = bare(args)
    run = Running(args)
    run.reached("waiting on a small stack\n")
    r = inject(run.pid, "PMM_START=1", extra=["--timeout", "300"])
    assert r.returncode == EXIT_NO_SAFE_POINT, r.stderr
    code, out, err = run.finish()
    assert (code, "waiting on a small stack\n" + out, err) == (0, want, "")


def test_a_thread_in_a_callback_of_the_loader_is_not_a_safe_point() -> None:
    """The only thread waits in the program's callback of dl_iterate_phdr,
    which holds the loader's lock: its own code is innermost, the loader's
    frame lies above it. The thread's call chain, unwound, shows it (a scan
    of the stack up to the first return address into the program's code
    took it as safe), so no safe point comes (exit 9) and the program runs
    on as bare."""
    args = ["2", "in-loader"]
    want = bare(args)
    run = Running(args)
    run.reached("waiting in the loader\n")
    r = inject(run.pid, "PMM_START=1", extra=["--timeout", "300"])
    assert r.returncode == EXIT_NO_SAFE_POINT, r.stdout + r.stderr
    code, out, err = run.finish()
    assert (code, "waiting in the loader\n" + out, err) == (0, want, "")


def test_attach_sampled(tmp_path: Path) -> None:
    """PMM_SAMPLE=4096: weighted samples, far fewer records than events."""
    args = ["30"]
    want = bare(args)
    log = tmp_path / "log"
    run = Running(args)
    r = inject(run.pid, "PMM_START=1", "PMM_SAMPLE=4096", f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    code, out, _ = run.finish()
    assert code == 0 and out == want
    recs = [rec for _, rs in fake_log_batches(log) for rec in rs
            if rec.op in (uapi.Op.MALLOC, uapi.Op.REALLOC)]
    assert recs and any(rec.weight > 1 for rec in recs)
    assert len(recs) < 2000 * 30


def test_attach_follows_a_library_loaded_later(tmp_path: Path) -> None:
    """A library dlopened after the attach allocates through its own GOT:
    its calls are redirected when it is loaded (70001..70100 bytes, 100 a
    round from round 10 of 25)."""
    lib = BIN / "libattachee.so"
    args = ["25", "dlopen", str(lib), "10"]
    log = tmp_path / "log"
    run = Running(args)
    r = inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    code, out, _ = run.finish()
    assert code == 0, out
    sizes = [rec.size for _, rs in fake_log_batches(log) for rec in rs
             for _ in range(rec.weight) if rec.op == uapi.Op.MALLOC]
    from_lib = [s for s in sizes if 70001 <= s <= 70100]
    assert len(from_lib) == 100 * 15


def test_an_object_of_another_namespace_is_left_alone(tmp_path: Path) -> None:
    """A library dlmopened into a namespace of its own, bound lazily, that
    allocated through its libc (malloc, strdup) before the attach and frees
    after it through a free bound only then: its entries, and its libc's,
    are left alone (redirected, its free would reach the program's libc with
    a block of the other one's: glibc aborts), and the program runs as bare."""
    args = ["3", "dlmopen", str(BIN / "libattachee.so")]
    log = attached_as_bare(tmp_path, args)
    # redirected, its 65 frees would reach the hook, as frees of older blocks
    older = [rec for rec in records(log)
             if rec.op == uapi.Op.FREE and rec.flags & uapi.REC_F_OLDER]
    assert older == []


@pytest.mark.skipif(not (BIN / "libattachee-jemalloc.so").exists(),
                    reason="libjemalloc2 not installed (make setup)")
def test_a_deepbind_object_bound_to_its_own_allocator_is_left_alone(tmp_path: Path) -> None:
    """A library loaded with RTLD_DEEPBIND and linked against jemalloc, bound
    lazily, whose malloc (jemalloc's) was bound before the attach and whose
    free is bound after it: none of its entries is redirected (its free,
    redirected, would hand jemalloc's blocks to libc's free)."""
    args = ["3", "deepbind", str(BIN / "libattachee-jemalloc.so")]
    # jemalloc's initial-exec TLS, dlopened: more than glibc's surplus
    env = dict(clean_env(), GLIBC_TUNABLES="glibc.rtld.optional_static_tls=16384")
    log = attached_as_bare(tmp_path, args, env=env)
    older = [rec for rec in records(log)
             if rec.op == uapi.Op.FREE and rec.flags & uapi.REC_F_OLDER]
    assert older == []


def test_entries_of_text_relocations_are_redirected(tmp_path: Path) -> None:
    """A library with text relocations (-z notext) holds malloc and free in
    tables on a read-only page: the attach makes the page writable for the
    writes and gives it its protection back; its allocation after the
    attach is recorded, its frees of blocks from before go as older."""
    lib = BIN / "libtextrel.so"
    args = ["3", "preload", str(lib)]
    want = bare(args)
    log = tmp_path / "log"
    run = Running(args)

    def lib_maps() -> list[str]:
        return sorted(line.split()[1] for line in open(f"/proc/{run.pid}/maps")
                      if line.rstrip().endswith(str(lib)))

    before = lib_maps()
    r = inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    assert lib_maps() == before and "rw-p" not in before[:3]
    code, out, err = run.finish()
    assert (code, out, err) == (0, want, "")
    recs = records(log)
    assert [rec.size for rec in recs if rec.size == 77777] == [77777]
    assert sum(1 for rec in recs if rec.op == uapi.Op.FREE and rec.flags & uapi.REC_F_OLDER) \
        >= 16


def test_second_attach_while_monitored_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    run = Running(["30"])
    log = tmp_path / "log"
    assert inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}").returncode == 0
    r = inject(run.pid, "PMM_START=1")
    assert r.returncode == EXIT_ATTACH_FAILED
    assert "monitored now" in r.stderr
    code, out, _ = run.finish()
    assert code == 0 and "short_sleeps 0" in out


def test_refuses_a_preloaded_process(tmp_path: Path) -> None:
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_FAKE_UNMONITORED="1", PMM_QUIET="1")
    run = Running(["20"], env=env)
    r = inject(run.pid)
    assert r.returncode == EXIT_ATTACH_FAILED
    assert "preloaded already" in r.stderr
    assert run.finish()[0] == 0


def test_refuses_no_such_process() -> None:
    r = inject(2**22 + 12345)
    assert r.returncode == EXIT_NO_PROCESS and "no process" in r.stderr


def test_refuses_bad_settings() -> None:
    r = inject(os.getpid(), "SAMPLE=5")
    assert r.returncode == EXIT_USAGE and "bad setting" in r.stderr


def test_refuses_a_static_program() -> None:
    proc = subprocess.Popen([str(BIN / "attachee-static"), "20", "wait", "0"],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline().split()[1])
    r = inject(pid)
    assert r.returncode == EXIT_NOT_DYNAMIC, r.stderr
    assert "statically linked" in r.stderr
    out, _ = proc.communicate(b"go\n", timeout=60)
    assert proc.returncode == 0 and b"short_sleeps 0" in out


def test_refuses_a_traced_process() -> None:
    """traced by this test (PTRACE_SEIZE, which stops nothing)"""
    run = Running(["20"])
    libc = ctypes.CDLL(None, use_errno=True)
    ptrace_seize, ptrace_detach = 0x4206, 17
    assert libc.ptrace(ptrace_seize, run.pid, None, None) == 0, ctypes.get_errno()
    r = inject(run.pid)
    assert r.returncode == EXIT_TRACED and "traced already" in r.stderr
    # a seized tracee detaches only when stopped: let it run to its end
    libc.ptrace(ptrace_detach, run.pid, None, None)
    code, out, _ = run.finish()
    assert code == 0 and "short_sleeps 0" in out


def test_refuses_seccomp_unless_allowed(tmp_path: Path) -> None:
    run = Running(["30", "seccomp"])
    r = inject(run.pid)
    assert r.returncode == EXIT_SECCOMP and "seccomp filter" in r.stderr
    r = inject(run.pid, f"PMM_FAKE_LOG={tmp_path / 'log'}", "PMM_START=1",
               extra=["--allow-seccomp"])
    assert r.returncode == 0, r.stderr
    assert run.finish()[0] == 0


def test_refuses_without_ptrace_permission() -> None:
    """nobody may not ptrace root's process"""
    run = Running(["20"])

    def attempt() -> list[object]:
        r = inject(run.pid)
        return [r.returncode, r.stderr]

    code, err = as_user(NOBODY, NOBODY, attempt)
    assert code == EXIT_PERMISSION, err
    assert "refused" in str(err)
    assert run.finish()[0] == 0


def test_attach_in_another_mount_namespace_loads_a_copy(tmp_path: Path) -> None:
    """In another mount namespace the library's path is an empty tmpfs (a
    container without the hook): a copy is loaded from a memfd of the
    process's, whose descriptor is closed after; the attach records, and
    the program runs as bare."""
    hooklib = TOP / "hooklib"
    args = ["20"]
    want = bare(args)
    shell = f"mount -t tmpfs none {hooklib} && exec {ATTACHEE} 20 wait 0"
    run = Running([], argv=["unshare", "-m", "--propagation", "private", "sh", "-c", shell])
    log = tmp_path / "log"
    r = inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={log}")
    assert r.returncode == 0, r.stderr
    assert "loaded from a memfd" in r.stdout
    maps = open(f"/proc/{run.pid}/maps").read()
    assert "/memfd:libpmmhook.so" in maps
    fd_dir = f"/proc/{run.pid}/fd"
    assert not any("memfd:" in os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir))
    code, out, err = run.finish()
    assert (code, out, err) == (0, want, "")
    c = ops(log)
    assert sum(n for (op, _), n in c.items() if op == uapi.Op.MALLOC) >= 4000 * 20


@pytest.mark.parametrize("rounds", [8])
def test_attach_detach_many_times_is_refused_cleanly(rounds: int, tmp_path: Path) -> None:
    """Attaching again and again while monitored: each refused, the program
    untouched (a stop needs the module: the guest tests do attach/detach)."""
    run = Running(["40", "threads", "4"])
    assert inject(run.pid, "PMM_START=1", f"PMM_FAKE_LOG={tmp_path / 'log'}").returncode == 0
    for _ in range(rounds):
        assert inject(run.pid).returncode == EXIT_ATTACH_FAILED
    code, out, _ = run.finish()
    assert code == 0 and "short_sleeps 0" in out


# -- pmm-inject --exec: started with the hook attached at the entry point ----

STARTUP = BIN / "startup"


def exec_inject(argv: list[str], *settings: str, lib: Path = FAKE,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(INJECT), "--lib", str(lib), "--exec", *settings, "--", *argv],
                          env=env or clean_env(), capture_output=True, text=True, timeout=60)


def test_startup_records_from_the_entry_point_and_runs_as_bare(tmp_path: Path) -> None:
    """Started by pmm-inject --exec: the program's constructor's block and
    main's first are recorded (in that order, before anything else), its
    output and exit status are a bare run's: no LD_PRELOAD and no PMM_*
    variable in its environment, and the child it runs (fork, exec) has no
    hook mapped and sends nothing."""
    bare_run = subprocess.run([str(STARTUP), "7"], env=clean_env(), capture_output=True,
                              text=True, timeout=60)
    assert bare_run.returncode == 7
    assert bare_run.stdout.startswith("LD_PRELOAD unset, 0 PMM_* variables, ")
    assert "child: hook mapped no, LD_PRELOAD unset\n" in bare_run.stdout
    log = tmp_path / "log"
    r = exec_inject([str(STARTUP), "7"], "PMM_START=1", f"PMM_FAKE_LOG={log}")
    assert (r.returncode, r.stdout, r.stderr) == (7, bare_run.stdout, "")
    calls = fake_log_calls(log)
    assert len({c.pid for c in calls}) == 1  # the program's: not its child's
    mallocs = [rec.size for rec in records(log) if rec.op == uapi.Op.MALLOC]
    assert mallocs[:2] == [222221, 111111]
    assert 333331 not in mallocs
    # main's block freed: cancelled in the buffer, or sent; nothing older
    recs = records(log)
    (block,) = [rec for rec in recs if rec.size == 111111]
    assert block.flags & uapi.REC_F_FREED or any(
        rec.op == uapi.Op.FREE and rec.ptr == block.ptr for rec in recs)
    assert not any(rec.flags & uapi.REC_F_OLDER for rec in recs)


def test_startup_environment_is_untouched(tmp_path: Path) -> None:
    """/proc/PID/environ of the running program is the one it was given."""
    env = clean_env(STARTUP_MARK="1")
    proc = subprocess.Popen([str(INJECT), "--lib", str(FAKE), "--exec", "PMM_START=1",
                             f"PMM_FAKE_LOG={tmp_path / 'log'}", "--", str(STARTUP), "0",
                             "wait"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.readline() != b"waiting\n":
        pass
    (pid,) = [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
    environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")[:-1]
    assert sorted(environ) == sorted(f"{k}={v}".encode() for k, v in env.items())
    assert "libpmmhook-fake.so" in open(f"/proc/{pid}/maps").read()
    assert open(f"/proc/{pid}/status").read().count("TracerPid:\t0\n") == 1
    proc.communicate(b"", timeout=60)
    assert proc.returncode == 0


def test_startup_forwards_signals_and_dies_as_the_program() -> None:
    """SIGTERM sent to pmm-inject reaches the program, which dies of it;
    pmm-inject then ends by the same signal. A program that kills itself:
    the same."""
    proc = subprocess.Popen([str(INJECT), "--lib", str(FAKE), "--exec", "--", str(STARTUP),
                             "0", "wait"], env=clean_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.readline() != b"waiting\n":
        pass
    proc.send_signal(signal.SIGTERM)
    # stdin stays open until it ends: at its end the program would exit 0
    # by itself, before a late forwarded signal (communicate() closes it)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    _, err = proc.communicate(timeout=60)
    assert err == b""
    r = exec_inject([str(STARTUP), "0", "kill"])
    assert (r.returncode, r.stderr) == (-signal.SIGTERM, "")
    assert r.stdout.endswith("child status 0\n")


def child_of(tracer: subprocess.Popen[bytes], parent: int, exe: Path | None = None) -> int:
    """A child of parent (one running exe, if given), waited for while the
    tracer runs. strace forks children of its own to try ptrace before it
    starts its tracee: its first child may be one of those, which end."""
    deadline = time.monotonic() + 60
    while True:
        for kid in children_of(parent):
            try:
                if exe is None or Path(f"/proc/{kid}/exe").resolve() == exe.resolve():
                    return kid
            except OSError:
                continue  # gone meanwhile
        assert tracer.poll() is None
        assert time.monotonic() < deadline, f"no child of {parent}"
        time.sleep(0.01)


def test_startup_a_signal_during_the_start_is_not_lost() -> None:
    """SIGTERM that reaches pmm-inject while it starts the program, between
    its fork and the seize: strace holds pmm-inject's fork in the kernel for
    2 s (the program exists, pmm-inject has not learnt its pid), and the
    signal comes then. It waits, blocked, until the program is seized, and
    ends it before it runs; pmm-inject then dies of it. It was lost (the
    handler had no pid to pass it to) and the program ran to its end."""
    proc = subprocess.Popen(["strace", "-o", "/dev/null", "-e", "trace=clone", "-e",
                             "inject=clone:delay_exit=2000000", str(INJECT), "--lib", str(FAKE),
                             "--exec", "--", str(STARTUP), "0", "wait"], env=clean_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        inject_pid = child_of(proc, proc.pid, INJECT)
        child_of(proc, inject_pid)  # forked; the fork has not returned
        os.kill(inject_pid, signal.SIGTERM)
        # a lost signal: the program runs, and exits 0 at its stdin's end
        time.sleep(3)
    finally:
        out, err = proc.communicate(timeout=60)
    # strace ends as its tracee did
    assert (proc.returncode, out) == (-signal.SIGTERM, b"")
    assert err.decode() == (f"pmm-inject: {STARTUP} ended before its entry point (signal 15): "
                            "not monitored\n")


def test_startup_refuses_a_static_program_before_it_runs() -> None:
    r = exec_inject([str(BIN / "attachee-static"), "1"], "PMM_START=1")
    assert r.returncode == EXIT_NOT_DYNAMIC
    assert r.stdout == ""  # it never ran: attachee prints "ready PID" first
    assert r.stderr.count("\n") == 1 and "statically linked" in r.stderr


def test_startup_of_a_missing_program() -> None:
    """As a shell: 127 and one line."""
    r = exec_inject(["/nonexistent/prog"], "PMM_START=1")
    assert (r.returncode, r.stdout) == (127, "")
    assert r.stderr == "pmm-inject: /nonexistent/prog: command not found\n"
    r = exec_inject(["no-such-command-pmm"], "PMM_START=1")
    assert (r.returncode, r.stderr) == (127, "pmm-inject: no-such-command-pmm: "
                                             "command not found\n")


def test_startup_status_fd(tmp_path: Path) -> None:
    """--status-fd: "pid PID" once it runs monitored (the program's pid,
    pmm-inject's child); a refusal's line goes there, not to stderr."""
    def status_of(argv: list[str]) -> tuple[int, str, str]:
        rfd, wfd = os.pipe()
        proc = subprocess.Popen([str(INJECT), "--lib", str(FAKE), "--status-fd", str(wfd),
                                 "--exec", "PMM_START=1", f"PMM_FAKE_LOG={tmp_path / 'log'}",
                                 "--", *argv], env=clean_env(), pass_fds=(wfd,),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(wfd)
        with os.fdopen(rfd) as f:
            line = f.read()
        _, err = proc.communicate(timeout=60)
        return proc.returncode, line, err.decode()

    code, line, err = status_of([str(STARTUP), "3"])
    assert (code, err) == (3, "")
    word, pid = line.split()
    assert word == "pid" and {c.pid for c in fake_log_calls(tmp_path / "log")} == {int(pid)}
    assert status_of(["/nonexistent/prog"]) == (
        127, "error /nonexistent/prog: command not found\n", "")
    code, line, err = status_of([str(BIN / "attachee-static")])
    assert code == EXIT_NOT_DYNAMIC and line.startswith("error ") and err == ""


def test_pmctl_run_no_preload(tmp_path: Path) -> None:
    """pmctl run --no-preload: the command started through pmm-inject --exec
    prints and ends as bare (its environment the same: pmctl's, with no
    LD_PRELOAD), pmctl names its pid (the one whose records the hook sends,
    the PMM_* of pmctl's environment passed on as settings) and captures
    its maps, the hook in them; refusals are pmctl's one line."""
    import sys

    log = tmp_path / "log"
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")
    env = clean_env(PMM_DEVICE=str(dev), PMM_HOOKLIB=str(FAKE), PMM_FAKE_LOG=str(log),
                    PMM_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(TOP))

    def pmctl(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pmctl", "run", "--no-preload", "--",
                               *argv], env=env, capture_output=True, text=True, timeout=60)

    want = subprocess.run([str(STARTUP), "5"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert "LD_PRELOAD unset, 4 PMM_* variables" in want.stdout
    r = pmctl(str(STARTUP), "5")
    assert (r.returncode, r.stdout) == (5, want.stdout)
    assert r.stderr.startswith("pmctl: pid ") and r.stderr.count("\n") == 1, r.stderr
    pid = int(r.stderr.split()[2])
    assert {c.pid for c in fake_log_calls(log)} == {pid}
    (maps,) = (tmp_path / "cache" / "maps").glob(f"{pid}-*")
    assert str(FAKE) in maps.read_text() and str(STARTUP) in maps.read_text()
    r = pmctl("/nonexistent/prog")
    assert (r.returncode, r.stderr) == (127, "pmctl: /nonexistent/prog: command not found\n")
    r = pmctl(str(BIN / "attachee-static"), "1")
    assert (r.returncode, r.stdout) == (21, "")  # ExitCode.ATTACH_NOT_DYNAMIC
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("pmctl: ")
    assert "statically linked" in r.stderr
