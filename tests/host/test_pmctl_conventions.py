"""pmctl as users expect it (issue 27): --version, durations with units and one
meaning per option, sizes in binary units, usage lines and help without
private words, refused combinations, and what `pmctl run` says at its end.

The device is faked at pmm.kernel.device.Device's methods (the host has no /dev/pmm):
PMM_DEVICE is a regular file, so Device.open works, and each test says what
the module answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import pmm
from pmctl import cli, options
from pmctl.exitcodes import handle_errors
from pmm.errors import PmmError
from pmm.kernel.blockstream import pages_of
from pmm.kernel.device import Device
from pmm.kernel.model import Block, Bucket, ConfigInfo, ObjectFile, PidInfo, Sample, Site, StatsInfo

TOP = Path(__file__).resolve().parents[2]
S = 1_000_000_000

CFG = ConfigInfo(interval_ms=100, scan=1, start_pid=0, stop_pid=0, max_pids=64,
                 max_blocks_per_pid=1 << 20, max_sites_per_pid=1 << 16,
                 max_samples_per_pid=4096, max_pids_per_uid=8, exited_ttl_s=3600,
                 abi_version=9, monitored_pids=1, records_accepted=10, records_dropped=0,
                 unmatched_frees=0, kmem_bytes=3 << 20, records_queued=0, older_frees=0)


def pid_info(pid: int, **kw: Any) -> PidInfo:
    base = PidInfo(pid=pid, ppid=1, state=2, comm="prog", start_time_ns=1 * S,
                   monitor_start_ns=1 * S, exit_time_ns=3 * S, live_blocks=2,
                   live_bytes=5000, records=4, dropped_records=0, unmatched_frees=0,
                   pending_frees=0, samples=3, vm_bytes=64 << 20, rss_bytes=1536 << 10)
    return replace(base, **kw)


@dataclass
class FakeModule:
    """What the faked device answers, and the settings it was given."""

    config: ConfigInfo = CFG
    pids: list[PidInfo] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    objects: list[ObjectFile] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    set_calls: list[dict[str, Any]] = field(default_factory=list)
    fail: PmmError | None = None


@pytest.fixture()
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModule]:
    dev = tmp_path / "pmm"
    dev.write_bytes(b"")
    monkeypatch.setenv("PMM_DEVICE", str(dev))
    monkeypatch.setenv("PMM_CACHE_DIR", str(tmp_path / "cache"))
    m = FakeModule()

    def answer(value: Any) -> Any:
        if m.fail is not None:
            raise m.fail
        return value

    def set_config(self: Device, **kw: Any) -> None:
        m.set_calls.append({k: v for k, v in kw.items() if v is not None and k != "what"})
        answer(None)

    monkeypatch.setattr(Device, "get_config", lambda self: answer(m.config))
    monkeypatch.setattr(Device, "set_config", set_config)
    monkeypatch.setattr(Device, "monitored_pids", lambda self: answer(list(m.pids)))
    monkeypatch.setattr(Device, "blocks", lambda self, pid: answer(list(m.blocks)))
    monkeypatch.setattr(Device, "block_pages",
                        lambda self, pid: pages_of(answer(list(m.blocks))))
    monkeypatch.setattr(Device, "sites", lambda self, pid: answer(list(m.sites)))
    monkeypatch.setattr(Device, "objects", lambda self, pid: answer(list(m.objects)))
    monkeypatch.setattr(Device, "samples", lambda self, pid, cursor=0: answer(list(m.samples)))
    monkeypatch.setattr(Device, "stats", lambda self, pid: answer(
        StatsInfo(pid=pid, buckets=(Bucket(),) * 7, failed_allocs=0, unmatched_frees=0)))
    yield m


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args))


def usage_error(r: Any) -> str:
    """The one-line message of a usage error (exit 2), as `pmctl` prints it."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    return " ".join(r.stderr.split())


# -- --version ---------------------------------------------------------------

def test_version() -> None:
    want = f"pmctl {version('pmm')}"
    assert pmm.__version__ == version("pmm")
    r = subprocess.run([sys.executable, "-m", "pmctl", "--version"], capture_output=True,
                       text=True, cwd=TOP, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, want + "\n", "")
    installed = TOP / ".venv" / "bin" / "pmctl"
    if installed.exists():  # the console script
        r = subprocess.run([str(installed), "--version"], capture_output=True, text=True,
                           timeout=60)
        assert (r.returncode, r.stdout) == (0, want + "\n")
    r = invoke("--version")
    assert (r.exit_code, r.stdout) == (0, want + "\n")


# -- durations -----------------------------------------------------------------

@pytest.mark.parametrize(
    ("args", "sent"),
    [
        (["config", "--interval", "100ms"], {"interval_ms": 100}),
        (["config", "--interval", "2"], {"interval_ms": 2000}),  # a bare number: seconds
        (["config", "--interval", "1.5s"], {"interval_ms": 1500}),
        (["config", "--interval", "2m"], {"interval_ms": 120000}),
        (["config", "--interval", "1h"], {"interval_ms": 3600000}),
        (["config", "--interval", "10ms"], {"interval_ms": 10}),
        (["config", "--exited-ttl", "90"], {"exited_ttl_s": 90}),
        (["config", "--exited-ttl", "2m"], {"exited_ttl_s": 120}),
        (["config", "--exited-ttl", "7d"], {"exited_ttl_s": 604800}),
        (["start", "1", "--interval", "250ms"], {"start_pid": 1, "interval_ms": 250}),
        (["start", "1", "--interval", "5"], {"start_pid": 1, "interval_ms": 5000}),
        (["start", "1"], {"start_pid": 1}),
    ],
)
def test_durations_take_units(module: FakeModule, args: list[str],
                              sent: dict[str, int]) -> None:
    r = invoke(*args)
    assert r.exit_code == 0, r.stderr
    assert module.set_calls == [sent]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["config", "--interval", "5ms"],
         "Invalid value for '--interval': 5ms is out of range: the module accepts 10ms to 1h "
         "(see `pmctl config --help`)"),
        (["start", "1", "--interval", "2h"],
         "Invalid value for '--interval': 2h is out of range: the module accepts 10ms to 1h"),
        (["config", "--interval", "0.001"],
         "'--interval': 0.001 is out of range: the module accepts 10ms to 1h"),
        (["config", "--exited-ttl", "500ms"],
         "'--exited-ttl': 500ms is out of range: the module accepts 1s to 7d"),
        (["config", "--exited-ttl", "8d"],
         "'--exited-ttl': 8d is out of range: the module accepts 1s to 7d"),
        (["attach", "1", "--timeout", "0"],
         "'--timeout': 0 is out of range: at least 1ms"),
        (["config", "--interval", "fast"],
         "'--interval': 'fast' is not a duration: write a number with a unit, e.g. 100ms, "
         "5s, 2m, 1h (a bare number is seconds)"),
        (["logs", "1", "--since", "-5s"], "'--since': '-5s' is not a duration"),
    ],
)
def test_duration_refused_with_range_in_units(args: list[str], text: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pmctl", *args], capture_output=True, text=True,
                       cwd=TOP, timeout=60, env={**os.environ, "PMM_DEVICE": "/nonexistent"})
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("pmctl: Invalid value for ") and text in line, line


def test_attach_timeout_takes_units(module: FakeModule, monkeypatch: pytest.MonkeyPatch,
                                    tmp_path: Path) -> None:
    from pmm import attach, run

    lib = tmp_path / "libpmmhook.so"
    lib.write_bytes(b"")
    monkeypatch.setattr(run, "find_hooklib", lambda: lib)
    given: list[int] = []
    samples: list[int | None] = []

    def fake_attach(pid: int, hooklib: Path, **kw: Any) -> str:
        given.append(kw["timeout_ms"])
        samples.append(kw.get("sample"))
        return "pid attached"

    monkeypatch.setattr(attach, "attach", fake_attach)
    monkeypatch.setattr("pmm.symbolize.capture_maps", lambda pid: None)
    module.pids = [pid_info(4242, state=1)]
    for arg, ms in (("500ms", 500), ("3", 3000), ("1m", 60000)):
        r = invoke("attach", "4242", "--timeout", arg)
        assert r.exit_code == 0, r.stderr
        assert given[-1] == ms
    r = invoke("attach", "4242", "--sample", str(512 << 10))
    assert given[-1] == 2000  # the default, 2s
    assert r.stdout == "attached to pid 4242 (prog): sampled, 1 record per 512.0 KiB allocated\n"
    for arg in ("512K", "512KiB", "524288"):  # sizes as PMM_SAMPLE takes them
        assert invoke("attach", "4242", "--sample", arg).exit_code == 0
        assert samples[-1] == 512 << 10
    r = invoke("attach", "4242", "--sample", "1M")
    assert samples[-1] == 1 << 20 and "1 record per 1.0 MiB allocated" in r.stdout
    r = invoke("attach", "4242", "--sample", "12Q")
    assert r.exit_code == 2 and "'12Q' is not a size" in r.stderr
    helptext = re.sub(r"[\s│]+", " ", invoke("attach", "--help").stdout)
    assert "safe point (default 2s; 100ms, 5s, 2m, 1h; a bare number is seconds)" in helptext


def test_logs_since_takes_units(module: FakeModule, monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1000 * S
    monkeypatch.setattr(options, "now_monotonic_ns", lambda: now)
    monkeypatch.setattr("pmm.symbolize.capture_maps", lambda pid: None)
    me = os.getpid()
    module.pids = [pid_info(me, state=1)]
    ages = [0.05, 3, 90, 200]  # seconds
    module.blocks = [Block(ptr=0x1000 + i, prev_ptr=0, size=8, time_ns=now - int(a * S),
                           site=0, weight=1, op=1) for i, a in enumerate(ages)]

    def count(since: str) -> int:
        r = invoke("logs", str(me), "--since", since, "--json")
        assert r.exit_code == 0, r.stderr
        return len(json.loads(r.stdout)["blocks"])

    assert [count(x) for x in ("100ms", "5", "2m", "5m", "0")] == [1, 2, 3, 4, 0]


def test_format_duration_uses_the_largest_unit() -> None:
    from pmm.units import format_duration, parse_duration

    cases = {0.01: "10ms", 0.1: "100ms", 1.5: "1.5s", 90: "90s", 120: "2m", 3600: "1h",
             5400: "90m", 604800: "7d", 1: "1s"}
    assert {x: format_duration(x) for x in cases} == cases
    assert all(parse_duration(format_duration(x)) == x for x in cases)


def test_parse_duration_checks_the_range_it_is_given() -> None:
    """The one parser of both front ends: the bounds, 0 as "none", and the
    refusal's wording as each option says it."""
    from pmm.units import parse_duration

    assert parse_duration("5ms") == 0.005  # no range: any duration
    assert parse_duration("1h", 0.01, 3600) == 3600.0
    for text, lo, hi, said in [("5ms", 0.01, 3600, "5ms is out of range: 10ms to 1h"),
                               ("2h", 0.01, 3600, "2h is out of range: 10ms to 1h"),
                               ("0", 0.001, None, "0 is out of range: at least 1ms"),
                               ("2d", None, 86400, "2d is out of range: at most 1d")]:
        with pytest.raises(ValueError) as e:
            parse_duration(text, lo, hi)
        assert str(e.value) == said
    assert parse_duration("0", 0.01, zero_ok=True) == 0.0
    with pytest.raises(ValueError, match="^'5ms' is shorter than 10ms$"):
        parse_duration("5ms", 0.01, out_of_range="{text!r} is shorter than {minimum}")


def test_one_error_wrapper_for_both_front_ends(capsys: pytest.CaptureFixture[str]) -> None:
    """pmctl's handle_errors and pmd's are pmm.errors.error_handler: the
    same line on stderr, each front end's exit status."""
    from pmd import main as pmd_main
    from pmm.errors import NoSuchPid

    def fails() -> None:
        raise NoSuchPid("no such process: pid 9 does not exist")

    for wrap, prog, code in [(handle_errors, "pmctl", 5), (pmd_main.handle_errors, "pmd", 1)]:
        with pytest.raises(typer.Exit) as e:
            wrap(fails)()
        assert e.value.exit_code == code
        assert capsys.readouterr().err == f"{prog}: no such process: pid 9 does not exist\n"


def test_durations_print_with_units(module: FakeModule) -> None:
    module.config = replace(CFG, interval_ms=100, exited_ttl_s=3600)
    rows = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1)
                for ln in invoke("config").stdout.splitlines()[1:])
    assert (rows["interval"], rows["exited pids kept"]) == ("100ms", "1h")
    module.config = replace(CFG, interval_ms=1500, exited_ttl_s=90)
    rows = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1)
                for ln in invoke("config").stdout.splitlines()[1:])
    assert (rows["interval"], rows["exited pids kept"]) == ("1.5s", "90s")
    last = invoke("status").stdout.splitlines()[-1]
    assert last.startswith("interval 1.5s, scan on, monitored 1/64, ")


# -- sizes ---------------------------------------------------------------------

def test_sizes_in_binary_units(module: FakeModule, monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    module.pids = [pid_info(me, state=1, live_bytes=5000, rss_bytes=1536 << 10,
                            vm_bytes=64 << 20)]
    status = invoke("status").stdout.splitlines()
    assert re.split(r"\s{2,}", status[1].strip())[4:8] == ["2", "4.9 KiB", "1.5 MiB",
                                                            "64.0 MiB"]
    assert status[-1].endswith(", kernel memory 3.0 MiB")
    rows = dict(re.split(r"\s{2,}", ln.strip(), maxsplit=1)
                for ln in invoke("config").stdout.splitlines()[1:])
    assert rows["kernel memory"] == "3.0 MiB"
    # leaks: the header and the BYTES column
    now = 1000 * S
    monkeypatch.setattr(options, "now_monotonic_ns", lambda: now)
    module.blocks = [Block(ptr=0x1000, prev_ptr=0, size=4000, time_ns=now - S, site=0,
                           weight=1, op=1),
                     Block(ptr=0x2000, prev_ptr=0, size=1000, time_ns=now - S, site=0,
                           weight=1, op=1)]
    lines = invoke("leaks", str(me)).stdout.splitlines()
    assert lines[0] == f"pid {me} (prog, running): 2 live blocks, 4.9 KiB in 1 site"
    assert re.split(r"\s{2,}", lines[2].strip())[:2] == ["4.9 KiB", "2"]
    # JSON stays exact
    r = invoke("status", "--json")
    (p,) = json.loads(r.stdout)["pids"]
    assert (p["live_bytes"], p["rss_bytes"], p["vm_bytes"]) == (5000, 1536 << 10, 64 << 20)


# -- help and usage --------------------------------------------------------------

PRIVATE = re.compile(r"PMMM|article|START_PID|STOP_PID|seeds/|\{pid\}|\{PID\}", re.I)


def all_commands() -> dict[str, Any]:
    return dict(getattr(typer.main.get_command(cli.app), "commands", {}))


def test_usage_lines_name_arguments_plainly() -> None:
    want = {
        "start": "Usage: pmctl start [OPTIONS] PID",
        "stop": "Usage: pmctl stop [OPTIONS] PID",
        "attach": "Usage: pmctl attach [OPTIONS] PID",
        "leaks": "Usage: pmctl leaks [OPTIONS] PID",
        "logs": "Usage: pmctl logs [OPTIONS] PID",
        "stats": "Usage: pmctl stats [OPTIONS] PID",
        "status": "Usage: pmctl status [OPTIONS]",
        "config": "Usage: pmctl config [OPTIONS]",
        "run": "Usage: pmctl run [OPTIONS] CMD...",
        "alerts": "Usage: pmctl alerts [OPTIONS] [PID]",
        "trend": "Usage: pmctl trend [OPTIONS] PID",
    }
    for name, usage in want.items():
        r = invoke(name, "--help")
        assert r.exit_code == 0, r.stderr
        first = next(ln.strip() for ln in r.stdout.splitlines() if ln.strip())
        assert first == usage


def test_command_list_is_one_line_each() -> None:
    """`pmctl --help` lists each command by its help's first paragraph, on
    one line however the docstring wraps it."""
    for name, cmd in all_commands().items():
        assert cmd.short_help and "\n" not in cmd.short_help, name
        first = " ".join((cmd.help or "").split("\n\n")[0].split())
        assert cmd.short_help == first
    assert all_commands()["attach"].short_help == (
        "Track PID's call sites without a restart: load the hook into the running process.")


def test_help_has_no_private_words() -> None:
    texts = [invoke("--help").stdout]
    for name in all_commands():
        texts.append(invoke(name, "--help").stdout)
    for text in texts:
        assert PRIVATE.search(text) is None, PRIVATE.search(text)
    # the words are caught where they are
    assert PRIVATE.search("Start monitoring PID (START_PID)")
    assert PRIVATE.search("Usage: pmctl start [OPTIONS] {pid}")


def test_library_texts_have_no_private_words() -> None:
    """Messages and docs of the files pmctl's commands print from."""
    commands = sorted(str(f.relative_to(TOP)) for f in (TOP / "pmctl").glob("*.py"))
    for rel in (*commands, "src/pmm/kernel/model.py", "src/pmm/analysis/leaks.py",
                "src/pmm/analysis/stats.py", "src/pmm/output.py", "src/pmm/kernel/pmmfiles.py",
                "src/pmm/kernel/device.py", "src/pmm/statusview.py", "src/pmm/blocklog.py",
                "src/pmm/alertlist.py"):
        text = (TOP / rel).read_text()
        found = re.findall(r"PMMM|article's|\(START_PID\)|\(STOP_PID\)", text)
        assert found == [], (rel, found)


# -- refusals --------------------------------------------------------------------

def test_run_refuses_quiet_with_json() -> None:
    r = subprocess.run([sys.executable, "-m", "pmctl", "run", "--quiet", "--json", "--",
                        "true"], capture_output=True, text=True, cwd=TOP, timeout=60)
    assert r.returncode == 2
    assert r.stderr == ("pmctl: Invalid value for '--quiet': not with --json (--json prints "
                        "the pid on stderr, --quiet nothing): choose one (see `pmctl run "
                        "--help`)\n")


# -- the end of `pmctl run` ----------------------------------------------------------

@pytest.fixture()
def hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real hook when it is built (PMM_QUIET: it finds no module), else a
    stand-in file: run's trailer does not depend on it."""
    lib = TOP / "hooklib" / "libpmmhook.so"
    if not lib.exists():
        lib = tmp_path / "libpmmhook.so"
        lib.write_bytes(b"")
        monkeypatch.setattr("pmm.run.child_env", lambda base, *a, **k: dict(base))
    monkeypatch.setenv("PMM_HOOKLIB", str(lib))
    monkeypatch.setenv("PMM_QUIET", "1")


def run_pid(stderr: str) -> int:
    m = re.search(r"^pmctl: pid (\d+)$", stderr, re.M)
    assert m, stderr
    return int(m.group(1))


def test_run_ends_with_what_to_run_next(module: FakeModule, hook: None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def monitored(self: Device) -> list[PidInfo]:
        return [pid_info(p, samples=3) for p in seen]

    monkeypatch.setattr(Device, "monitored_pids", monitored)
    import pmm.run as run_mod  # `run` imports run_command when it runs

    real_run = run_mod.run_command

    def spy(argv: Any, env: Any, on_start: Any, **kw: Any) -> int:
        def start(pid: int) -> None:
            seen.append(pid)
            on_start(pid)

        return real_run(argv, env, start, **kw)

    monkeypatch.setattr(run_mod, "run_command", spy)
    r = invoke("run", "--", "sh", "-c", "exit 3")
    assert r.exit_code == 3, r.stderr
    pid = run_pid(r.stderr)
    assert seen == [pid]
    lines = r.stderr.splitlines()
    assert lines[1:] == [
        f"pmctl: pid {pid} was monitored; the module keeps its records for 1h after its "
        f"exit or their last read, or until `pmctl stop {pid}`. To see them:",
        f"  pmctl leaks {pid}                live blocks by allocation site, largest first",
        f"  pmctl logs {pid}                 live blocks, oldest first",
        f"  pmctl stats {pid}                allocations by size",
        f"  pmctl trend {pid} --source kmod  whether its memory grew (3 samples)",
    ]
    # each command it names works on the exited process's entry
    module.samples = [Sample(time_ns=(1 + i) * S, vm=1 << 20, rss=1 << 19, rss_anon=0,
                             rss_file=0, rss_shmem=0) for i in range(3)]
    for ln in lines[2:]:
        argv = shlex.split(ln.split("  ")[1])
        assert argv[0] == "pmctl"
        res = invoke(*argv[1:])
        ok = (0, 10, 11, 12) if argv[1] == "trend" else (0,)  # trend: its verdicts
        assert res.exit_code in ok, (argv, res.exit_code, res.stdout, res.stderr)

    # no samples yet: no trend; --follow-fork: status lists the children
    monkeypatch.setattr(Device, "monitored_pids",
                        lambda self: [pid_info(p, samples=0) for p in seen])
    module.config = replace(CFG, exited_ttl_s=90)
    r = invoke("run", "--follow-fork", "--", "true")
    pid = run_pid(r.stderr)
    assert r.stderr.splitlines()[1:] == [
        f"pmctl: pid {pid} was monitored; the module keeps its records for 90s after its "
        f"exit or their last read, or until `pmctl stop {pid}`. To see them:",
        f"  pmctl leaks {pid}  live blocks by allocation site, largest first",
        f"  pmctl logs {pid}   live blocks, oldest first",
        f"  pmctl stats {pid}  allocations by size",
        f"  {'pmctl status'.ljust(len(f'pmctl stats {pid}'))}  its children monitored with it",
    ]

    # --quiet: nothing of pmctl's; --json: the one document
    r = invoke("run", "--quiet", "--", "true")
    assert (r.exit_code, r.stderr) == (0, "")
    r = invoke("run", "--json", "--", "true")
    assert json.loads(r.stderr)["argv"] == ["true"]


def test_run_says_nothing_it_cannot_tell(module: FakeModule, hook: None) -> None:
    # the module does not monitor it: the warning, no commands
    r = invoke("run", "--", "true")
    assert r.exit_code == 0
    pid = run_pid(r.stderr)
    assert r.stderr.splitlines()[1:] == [
        f"pmctl: warning: pid {pid} was not monitored (the hook could not start it: run "
        "with PMM_QUIET unset to see why)"]
    # the module cannot be asked: nothing more than the pid
    module.fail = PmmError("reading: Input/output error (EIO)")
    r = invoke("run", "--", "true")
    assert r.exit_code == 0
    assert r.stderr == f"pmctl: pid {run_pid(r.stderr)}\n"
