"""pmctl on the host (no module): error paths, exit codes, help text, `run`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pmctl import cli
from pmctl.exitcodes import ExitCode
from pmm import run
from pmm.errors import PmmError
from pmm.kernel import device

TOP = Path(__file__).resolve().parents[2]


def pmctl(*args: str, env: dict[str, str] | None = None, pre: list[str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("PMM_DEVICE", "/nonexistent/pmm")
    return subprocess.run(
        [*(pre or []), sys.executable, "-m", "pmctl", *args],
        capture_output=True, text=True, env=e, cwd=TOP, timeout=timeout,
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("pmctl: ")
    return lines[0]


# -- device errors, through the real console entry point -------------------

@pytest.mark.parametrize("args", [["status"], ["config"], ["start", "1"], ["stop", "1"],
                                  ["logs", "1"], ["leaks", "1"], ["stats", "1"],
                                  ["config", "--interval", "100"]])
def test_module_not_loaded(args: list[str]) -> None:
    r = pmctl(*args)
    assert r.returncode == 3 == int(ExitCode.NO_MODULE)
    line = one_line(r.stderr)
    assert "/nonexistent/pmm does not exist: the pmm module is not loaded" in line
    assert "insmod" in line
    assert r.stdout == ""


def test_default_device_is_dev_pmm() -> None:
    e = dict(os.environ)
    e.pop("PMM_DEVICE", None)
    r = subprocess.run([sys.executable, "-m", "pmctl", "status"], capture_output=True,
                       text=True, env=e, cwd=TOP)
    if Path("/dev/pmm").exists():
        pytest.skip("/dev/pmm exists on this host")
    assert r.returncode == 3
    assert "/dev/pmm does not exist" in one_line(r.stderr)


@pytest.mark.parametrize("dev", ["/dev/null", "regular"])
def test_not_a_pmm_device(dev: str, tmp_path: Path) -> None:
    if dev == "regular":
        p = tmp_path / "pmm"
        p.write_bytes(b"")
        dev = str(p)
    r = pmctl("status", env={"PMM_DEVICE": dev})
    assert r.returncode == 8 == int(ExitCode.NOT_PMM_DEVICE)
    line = one_line(r.stderr)
    assert f"{dev} does not answer pmm ioctls (ENOTTY)" in line


def _drop_dac() -> list[str]:
    """A prefix that runs the command without the DAC override capabilities
    (root would otherwise open a mode 000 file)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv not installed")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search"]


def test_permission_denied(tmp_path: Path) -> None:
    p = tmp_path / "pmm"
    p.write_bytes(b"")
    p.chmod(0)
    r = pmctl("status", env={"PMM_DEVICE": str(p)}, pre=_drop_dac())
    assert r.returncode == 4 == int(ExitCode.PERMISSION)
    line = one_line(r.stderr)
    assert line == (f"pmctl: opening {p}: permission denied (EACCES): the device is root-only "
                    "by default; run as root, or have a udev rule grant your group access")


# -- errors the module returns, with ioctl faked (in process) ---------------

@pytest.fixture()
def fake_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """PMM_DEVICE is a regular file; fcntl.ioctl raises what `raise_` holds."""
    p = tmp_path / "pmm"
    p.write_bytes(b"")
    monkeypatch.setenv("PMM_DEVICE", str(p))
    state: list[Any] = [None]

    def fake_ioctl(fd: int, req: int, arg: Any = None, mut: bool = True) -> int:
        if state[0] is not None:
            raise OSError(state[0], os.strerror(state[0]))
        return 0

    monkeypatch.setattr("pmm.kernel.device.fcntl.ioctl", fake_ioctl)
    yield state


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli.app, args)


@pytest.mark.parametrize(
    ("args", "err", "code", "text"),
    [
        (["start", "999999"], errno.ESRCH, 5,
         "starting pid 999999: no such process: pid 999999 does not exist"),
        (["start", "1"], errno.EPERM, 4,
         "starting pid 1: permission denied (EPERM): run as root or as the owner of pid 1"),
        (["start", "1"], errno.EEXIST, 1, "starting pid 1: pid 1 is already monitored"),
        (["start", "1"], errno.ENOSPC, 9, "starting pid 1: a pmm limit is reached (ENOSPC"),
        (["stop", "1"], errno.ENOENT, 6,
         "stopping pid 1: pid 1 is not monitored (start with `pmctl start 1`)"),
        (["stop", "999999"], errno.ESRCH, 5, "stopping pid 999999: no such process"),
        (["config", "--interval", "5"], errno.EINVAL, 7,
         "changing the configuration: the module refused the value (EINVAL"),
        (["config", "--max-pids", "3"], errno.EPERM, 4,
         "changing the configuration: permission denied (EPERM): run as root "
         "(changing the configuration needs CAP_SYS_ADMIN)"),
        (["status"], errno.EIO, 1, "reading the configuration: Input/output error (EIO)"),
    ],
)
def test_module_errors(fake_dev: list[Any], args: list[str], err: int, code: int,
                       text: str) -> None:
    fake_dev[0] = err
    r = invoke(args)
    assert r.exit_code == code, r.output
    assert text in one_line(r.stderr)
    assert r.stdout == ""


def test_not_monitored_and_no_such_pid(fake_dev: list[Any]) -> None:
    """An empty MONITORED_PIDS list: a live pid is 'not monitored', a free one 'no such'."""
    me = os.getpid()
    for cmd in ("logs", "leaks", "stats"):
        r = invoke([cmd, str(me)])
        assert r.exit_code == 6 == int(ExitCode.NOT_MONITORED)
        assert one_line(r.stderr) == (
            f"pmctl: pid {me} is not monitored (start with `pmctl start {me}`)"
        )
    free = 4194304 + 1  # above pid_max's maximum: never a process
    r = invoke(["leaks", str(free)])
    assert r.exit_code == 5 == int(ExitCode.NO_SUCH_PID)
    assert f"no such process: pid {free} does not exist" in one_line(r.stderr)


def test_unexpected_exception_is_one_line(fake_dev: list[Any],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(device.Device, "get_config", boom)
    r = invoke(["config"])
    assert r.exit_code == 1
    assert one_line(r.stderr) == "pmctl: internal error: RuntimeError: boom (please report this)"


# -- bad options: typer's exit code 2, one line ----------------------------

@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["start", "abc"], "Invalid value for 'PID'"),
        (["start", "0"], "Invalid value for 'PID'"),
        (["start", "1", "--bogus"], "No such option: --bogus"),
        (["config", "--scan", "maybe"], "Invalid value for '--scan'"),
        (["config", "--interval", "-1"], "Invalid value for '--interval'"),
        (["leaks", "1", "--depth", "33"], "Invalid value for '--depth'"),
        (["logs", "1", "--limit", "0"], "Invalid value for '--limit'"),
        (["run", "--depth", "0", "--", "true"], "Invalid value for '--depth'"),
        (["run"], "Missing argument"),
        (["nosuchcommand"], "No such command"),
    ],
)
def test_bad_options(args: list[str], text: str) -> None:
    r = pmctl(*args)
    assert r.returncode == 2 == int(ExitCode.USAGE)
    line = one_line(r.stderr)
    assert text in line
    assert "--help`)" in line


# -- help text everywhere --------------------------------------------------

def test_every_command_and_option_has_help() -> None:
    root = typer.main.get_command(cli.app)
    assert root.help
    commands = getattr(root, "commands", {})
    want = {"start", "stop", "status", "config", "run", "logs", "leaks", "stats"}
    assert want <= set(commands)
    seen = 0
    for name, cmd in commands.items():
        assert (cmd.help or "").strip(), f"{name}: no help"
        for p in cmd.params:
            helptext = getattr(p, "help", None)
            assert helptext and helptext.strip(), f"{name} {p.name}: no help"
            seen += 1
        r = pmctl(name, "--help")
        assert r.returncode == 0, r.stderr
        assert "Usage: pmctl " + name in r.stdout
    assert seen >= 25
    assert commands["trend"].help


def test_json_option_on_every_command() -> None:
    root = typer.main.get_command(cli.app)
    names = getattr(root, "commands", {})
    assert "trend" in names
    for name, cmd in names.items():
        assert any("--json" in getattr(p, "opts", []) for p in cmd.params), name


# -- run -------------------------------------------------------------------

def test_run_env_and_hooklib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "libpmmhook.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("PMM_HOOKLIB", str(lib))
    assert run.find_hooklib() == lib.resolve()
    env = run.child_env({"LD_PRELOAD": "/x.so", "A": "1"}, lib, True, 4, 524288, 4096)
    assert env == {"LD_PRELOAD": f"{lib} /x.so", "A": "1", "PMM_START": "1",
                   "PMM_FOLLOW_FORK": "1", "PMM_DEPTH": "4", "PMM_SAMPLE": "524288",
                   "PMM_BUFFER": "4096"}
    assert run.child_env({}, lib) == {"LD_PRELOAD": str(lib), "PMM_START": "1"}
    monkeypatch.setenv("PMM_HOOKLIB", str(tmp_path / "missing.so"))
    monkeypatch.setattr(run, "hooklib_candidates", lambda: [tmp_path / "missing.so"])
    with pytest.raises(PmmError, match="libpmmhook.so is not found"):
        run.find_hooklib()


def test_exit_status() -> None:
    assert run.exit_status(0) == 0
    assert run.exit_status(3) == 3
    assert run.exit_status(-9) == 137


@pytest.fixture()
def run_env(tmp_path: Path) -> dict[str, str]:
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")
    lib = TOP / "hooklib" / "libpmmhook.so"
    return {
        "PMM_DEVICE": str(dev),  # opens, so `run` starts the command
        "PMM_HOOKLIB": str(lib) if lib.exists() else "/dev/null",
        "PMM_CACHE_DIR": str(tmp_path / "cache"),
        "PMM_QUIET": "1",
    }


def test_run_exit_status_and_pid(run_env: dict[str, str]) -> None:
    r = pmctl("run", "--", "sh", "-c", "echo out; echo err >&2; exit 7", env=run_env)
    assert r.returncode == 7
    assert r.stdout == "out\n"
    lines = r.stderr.splitlines()
    mine = [ln for ln in lines if ln.startswith("pmctl: ")]
    assert len(mine) == 1 and mine[0].startswith("pmctl: pid ") and mine[0][11:].isdigit()
    assert [ln for ln in lines if ln not in mine] == ["err"]  # the command's, in any order
    r = pmctl("run", "--", "sh", "-c", "kill -TERM $$", env=run_env)
    assert r.returncode == 128 + 15
    r = pmctl("run", "--", "/nonexistent/cmd", env=run_env)
    assert r.returncode == 127
    assert one_line(r.stderr) == "pmctl: /nonexistent/cmd: command not found"


def test_run_passes_on_a_sigterm_that_comes_while_it_starts_the_command(
        run_env: dict[str, str]) -> None:
    """strace holds pmctl's vfork 2 s in the kernel after the command's
    exec (the command runs, pmctl has not learnt its pid), and SIGTERM comes
    then. pmctl passes it on once the command has a pid, and exits as the
    command did (the command's 4 s outlast the hold). pmctl installed its
    handlers after the start: the SIGTERM ended pmctl and the command ran to
    its end."""
    command = [sys.executable, "-c", "import time; time.sleep(4); print('ran')"]
    env = {**os.environ, **run_env}
    proc = subprocess.Popen(["strace", "-o", "/dev/null", "-e", "trace=vfork", "-e",
                             "inject=vfork:delay_exit=2000000", sys.executable, "-m", "pmctl",
                             "run", "--", *command],
                            env=env, cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def pmctl_of_the_running_command() -> int | None:
        """pmctl's pid once the command it starts runs (strace's first
        children are its own, which try ptrace and end)."""
        for pmctl_pid in run.children_of(proc.pid):
            for kid in run.children_of(pmctl_pid):
                try:
                    cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmdline.split(b"\0")[:2] == [os.fsencode(command[0]), b"-c"]:
                    return pmctl_pid
        return None

    try:
        # its exec done; pmctl's vfork has not returned
        while (pmctl_pid := pmctl_of_the_running_command()) is None:
            assert proc.poll() is None
            time.sleep(0.01)
        os.kill(pmctl_pid, signal.SIGTERM)
    finally:
        out, err = proc.communicate(timeout=60)
    # strace ends as its tracee did
    assert (proc.returncode, out) == (128 + signal.SIGTERM, ""), err
    assert err.startswith("pmctl: pid "), err


def test_run_json_pid_and_maps_capture(run_env: dict[str, str], tmp_path: Path) -> None:
    r = pmctl("run", "--json", "--", "sleep", "0.3", env=run_env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stderr)
    assert doc["argv"] == ["sleep", "0.3"]
    pid = doc["pid"]
    files = list((tmp_path / "cache" / "maps").glob(f"{pid}-*"))
    assert len(files) == 1, files
    text = files[0].read_text()
    assert shutil.which("sleep") is not None
    assert os.path.realpath(shutil.which("sleep") or "") in text
    assert "libc.so.6" in text  # captured after the loader mapped libc


def test_run_refuses_without_module(run_env: dict[str, str]) -> None:
    run_env["PMM_DEVICE"] = "/nonexistent/pmm"
    r = pmctl("run", "--", "true", env=run_env)
    assert r.returncode == 3
    assert "not loaded" in one_line(r.stderr)


def test_json_keys_are_stable(fake_dev: list[Any]) -> None:
    """With a device that answers every ioctl with zeros: the documented keys."""
    cfg_keys = ["interval_ms", "scan", "start_pid", "stop_pid", "max_pids",
                "max_blocks_per_pid", "max_sites_per_pid", "max_samples_per_pid",
                "max_pids_per_uid", "exited_ttl_s", "abi_version", "monitored_pids",
                "records_accepted", "records_dropped", "unmatched_frees", "kmem_bytes",
                "records_queued", "older_frees"]
    r = invoke(["config", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == dict.fromkeys(cfg_keys, 0)
    r = invoke(["status", "--json"])
    assert json.loads(r.stdout) == {"config": dict.fromkeys(cfg_keys, 0), "pids": []}
    r = invoke(["start", "1", "--interval", "100ms", "--json"])
    assert json.loads(r.stdout) == {"pid": 1, "monitored": True, "interval_ms": 100}
    r = invoke(["stop", "1", "--json"])
    assert json.loads(r.stdout) == {"pid": 1, "monitored": False}
    # the per-pid dicts
    from pmm.kernel.model import PidInfo

    p = PidInfo(pid=5, ppid=1, state=2, comm="x", start_time_ns=1_000_000_000,
                monitor_start_ns=2_000_000_000, exit_time_ns=5_000_000_000, live_blocks=3,
                live_bytes=300, records=9, dropped_records=1, unmatched_frees=2,
                pending_frees=0, samples=4, vm_bytes=8192, rss_bytes=4096, older_frees=7)
    assert p.to_dict(9_000_000_000) == {
        "pid": 5, "ppid": 1, "comm": "x", "state": "exited", "uptime_s": 4.0,
        "monitored_s": 3.0, "live_blocks": 3, "live_bytes": 300, "rss_bytes": 4096,
        "vm_bytes": 8192, "records": 9, "dropped_records": 1, "unmatched_frees": 2,
        "older_frees": 7, "pending_frees": 0, "samples": 4, "start_time_ns": 1_000_000_000,
        "exit_time_ns": 5_000_000_000}


def test_run_follow_fork_captures_children_maps(run_env: dict[str, str],
                                                tmp_path: Path) -> None:
    r = pmctl("run", "--follow-fork", "--", "sh", "-c", "sleep 0.5 & wait", env=run_env)
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "cache" / "maps").iterdir())
    assert len(files) == 2, files  # sh and its child sleep
    texts = [f.read_text() for f in files]
    assert sum("/sleep" in t for t in texts) == 1 and all("libc.so.6" in t for t in texts)
    r = pmctl("run", "--", "sh", "-c", "sleep 0.3 & wait", env=run_env)
    assert len(list((tmp_path / "cache" / "maps").iterdir())) == 3  # sh only, this time
