"""The hook's device in its environment (issue 27): PMM_DEVICE names the file
the hook opens, as it does pmctl's, and the line saying that the device
cannot be opened comes once per process tree (a pipeline, a script, a
command's children), not once per process: once per command the user runs.

The host has no /dev/pmm, so the real library says it at every start; the
fake-device build (hooklib/libpmmhook-fake.so) opens PMM_DEVICE too and
answers as the module would whatever the file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hook_env import clean_env, fake_log_batches

TOP = Path(__file__).resolve().parents[2]
HOOK = TOP / "hooklib" / "libpmmhook.so"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
HBIN = TOP / "tests" / "progs" / "bin"
TRUE = "/bin/true"
TIMEOUT = 60
THEN = "; allocations pass through to libc"


def cannot_open(path: str) -> str:
    return f"pmm: cannot open {path}: no such file (is pmm.ko loaded?) (errno 2){THEN}"


def no_device() -> None:
    if Path("/dev/pmm").exists():
        pytest.skip("/dev/pmm exists here")


def lines(argv: list[str], lib: Path, new_session: bool = False,
          **extra: str) -> list[str]:
    """The stderr lines of argv run with lib preloaded and extra set; it must
    succeed."""
    env = clean_env(LD_PRELOAD=str(lib), **extra)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                       start_new_session=new_session)
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def test_pmm_device_path_named(tmp_path: Path) -> None:
    """PMM_DEVICE is the file the hook opens, named in its line; empty, the
    default; a file that is no pmm device is named as such."""
    no_device()
    missing = str(tmp_path / "no-such-device")
    assert lines([TRUE], HOOK, PMM_DEVICE=missing) == [cannot_open(missing)]
    assert lines([TRUE], HOOK, PMM_DEVICE="") == [cannot_open("/dev/pmm")]
    assert lines([TRUE], HOOK) == [cannot_open("/dev/pmm")]
    assert lines([TRUE], HOOK, PMM_DEVICE="/dev/null") == [
        f"pmm: /dev/null: not a pmm device (errno 25){THEN}"]
    assert lines([TRUE], HOOK, PMM_DEVICE=missing, PMM_QUIET="1") == []


def test_fake_device_at_pmm_device(tmp_path: Path) -> None:
    """The fake build opens PMM_DEVICE (the program's fd list shows it) and
    records as with its default, /dev/null; a path that does not exist is
    said, and nothing is sent."""
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")
    show_fds = ("import os\n"
                "for f in os.listdir('/proc/self/fd'):\n"
                "    try: int(f) > 2 and print(os.readlink(f'/proc/self/fd/{f}'))\n"
                "    except OSError: pass  # listdir's own, closed\n")
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_DEVICE=str(dev))
    r = subprocess.run(["/usr/bin/python3", "-c", show_fds], env=env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [str(dev)]  # the device, no /dev/null
    log = tmp_path / "log"
    assert lines([str(HBIN / "semantics")], FAKE, PMM_DEVICE=str(dev), PMM_START="1",
                 PMM_FAKE_LOG=str(log)) == []
    assert sum(len(recs) for _, recs in fake_log_batches(log)) >= 500
    log.unlink()
    missing = str(tmp_path / "no-such-device")
    assert lines([str(HBIN / "semantics")], FAKE, PMM_DEVICE=missing, PMM_START="1",
                 PMM_FAKE_LOG=str(log)) == [cannot_open(missing)]
    assert not log.exists()


def test_pipeline_says_it_once() -> None:
    """A shell's pipeline of three hooked programs, and a hooked program's
    children (sh's, git's...), inherit LD_PRELOAD: one line for all of
    them. Each used to say it: four lines."""
    no_device()
    pipeline = f"{TRUE} | {TRUE} | {TRUE}"
    assert lines(["sh", "-c", pipeline], HOOK) == [cannot_open("/dev/pmm")]
    nested = f"sh -c '{pipeline}'; {TRUE}; sh -c '{TRUE} & wait'"
    assert lines(["sh", "-c", nested], HOOK) == [cannot_open("/dev/pmm")]
    assert lines(["sh", "-c", pipeline], HOOK, PMM_QUIET="1") == []


def test_each_command_says_it_again() -> None:
    """Each separate command is told, in a session of its own (setsid) or
    in this one: nothing of an earlier one is kept."""
    no_device()
    pipeline = f"{TRUE} | {TRUE} | {TRUE}"
    for new_session in (True, True, False, False):
        assert lines(["sh", "-c", pipeline], HOOK, new_session) == [cannot_open("/dev/pmm")]


def test_group_leader_said_it() -> None:
    """A pipeline's programs whose parent is not hooked (a shell with
    LD_PRELOAD exported starts them) have their process group's leader,
    the pipeline's first program: when it is this library's, it said it.
    Here the leader is a hooked sh, the parent an unhooked one."""
    no_device()
    inner = f"LD_PRELOAD={HOOK} {TRUE}"
    argv = ["sh", "-c", f"env -u LD_PRELOAD sh -c '{inner}; {inner}'"]
    assert lines(argv, HOOK, new_session=True) == [cannot_open("/dev/pmm")]


def test_another_library_above_does_not_count() -> None:
    """Only this very library's file above counts: under a process hooked by
    the fake build (which says nothing), the real one says it."""
    no_device()
    argv = ["sh", "-c", f"LD_PRELOAD={HOOK} {TRUE}"]
    assert lines(argv, FAKE, PMM_DEVICE="") == [cannot_open("/dev/pmm")]
