"""libpmmhook.so on the host, without the module: real programs run under
LD_PRELOAD with stdout and exit status identical to a bare run, nothing on
stderr with PMM_QUIET=1, no hang.

Besides the real library (which finds no /dev/pmm and passes everything
through), the same programs run under hooklib/libpmmhook-fake.so:
the same code built to believe it is monitored (batches go to a no-op
system call instead of /dev/pmm), so the monitored paths (records, buffers,
flushes, site table, sampling, unwinding) run inside these programs too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hook_env import clean_env, fake_log_batches

TOP = Path(__file__).resolve().parents[2]
HOOK = TOP / "hooklib" / "libpmmhook.so"
FAKE = TOP / "hooklib" / "libpmmhook-fake.so"
HBIN = TOP / "tests" / "progs" / "bin"
TIMEOUT = 120

# name -> extra environment on top of LD_PRELOAD
MODES: dict[str, tuple[Path, dict[str, str]]] = {
    "passthrough": (HOOK, {}),
    "fake-exact": (FAKE, {}),
    "fake-sampled": (FAKE, {"PMM_SAMPLE": "4096"}),
    "fake-depth8": (FAKE, {"PMM_DEPTH": "8"}),
    "fake-mono-clock": (FAKE, {"PMM_CLOCK": "mono"}),
}

PY_SCRIPT = """
import json, collections
d = {}
for i in range(60000):
    d[str(i)] = [i] * (i % 7) + [str(i) * 3]
    if i % 3 == 0:
        del d[str(i // 2)]
c = collections.Counter(len(v) for v in d.values())
print(len(d), sorted(c.items()))
print(len(json.dumps(d)))
"""

PERL_SCRIPT = """
my %h; my @a;
for my $i (1..50000) {
    $h{"k$i"} = "v" x ($i % 50); push @a, [$i, "x$i"];
    delete $h{"k" . int($i/2)} if $i % 3 == 0;
}
my $t = 0; $t += length($h{$_}) for keys %h;
print scalar(keys %h), " $t ", scalar(@a), "\\n";
"""

SQL = (
    "create table t(id integer primary key, name text, v real);\n"
    "begin;\n"
    + "".join(f"insert into t(name, v) values ('name-{i}', {i * 1.5});\n" for i in range(4000))
    + "commit;\n"
    "create index t_name on t(name);\n"
    "select count(*), sum(v), max(name) from t where id % 7 = 3;\n"
    "select name from t order by v desc limit 3;\n"
)

C_PROGRAM = """
#include <stdio.h>
#include <stdlib.h>
struct node { struct node *next; int v; };
int main(void) {
    struct node *h = NULL; long s = 0;
    for (int i = 0; i < 1000; i++) {
        struct node *n = malloc(sizeof *n); n->v = i; n->next = h; h = n;
    }
    while (h) { struct node *n = h->next; s += h->v; free(h); h = n; }
    printf("sum %ld\\n", s);
    return 3;
}
"""


@pytest.fixture()
def work(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def run(argv: list[str], preload: Path | None, env_extra: dict[str, str] | None = None,
        cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[bytes]:
    env = clean_env(PMM_QUIET="1")
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    env.update(env_extra or {})
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=TIMEOUT,
                          input=stdin.encode() if stdin is not None else None)


def same_as_bare(argv: list[str], mode: str, cwd: Path | None = None,
                 stdin: str | None = None,
                 normalize: Callable[[bytes], bytes] = lambda b: b,
                 ) -> subprocess.CompletedProcess[bytes]:
    lib, extra = MODES[mode]
    bare = run(argv, None, cwd=cwd, stdin=stdin)
    hooked = run(argv, lib, extra, cwd=cwd, stdin=stdin)
    assert hooked.returncode == bare.returncode, hooked.stderr.decode(errors="replace")
    assert normalize(hooked.stdout) == normalize(bare.stdout)
    assert hooked.stderr == bare.stderr
    return hooked


def no_pid(out: bytes) -> bytes:
    return re.sub(rb"pid \d+", b"pid N", out)


@pytest.mark.parametrize("mode", MODES)
def test_python(mode: str, work: Path) -> None:
    (work / "a.py").write_text(PY_SCRIPT)
    r = same_as_bare(["/usr/bin/python3", str(work / "a.py")], mode)
    assert r.stdout.startswith(b"40000 ")


@pytest.mark.parametrize("mode", MODES)
def test_sqlite3(mode: str) -> None:
    r = same_as_bare(["sqlite3", ":memory:"], mode, stdin=SQL)
    assert r.stdout.splitlines()[0] == b"572|1716429.0|name-996"


@pytest.mark.parametrize("mode", MODES)
def test_gcc(mode: str, work: Path) -> None:
    (work / "p.c").write_text(C_PROGRAM)
    outs = []
    for name, lib in (("bare", None), ("hooked", MODES[mode])):
        exe = work / name
        if lib is None:
            r = run(["gcc", "-O2", "-o", str(exe), "p.c"], None, cwd=work)
        else:
            r = run(["gcc", "-O2", "-o", str(exe), "p.c"], lib[0], lib[1], cwd=work)
        assert r.returncode == 0 and r.stdout == b"" and r.stderr == b"", r.stderr
        outs.append(exe.read_bytes())
    assert outs[0] == outs[1]  # the compiler produced the same binary
    r = same_as_bare([str(work / "hooked")], mode)
    assert r.returncode == 3 and r.stdout == b"sum 499500\n"


@pytest.mark.parametrize("mode", MODES)
def test_perl(mode: str) -> None:
    r = same_as_bare(["perl", "-e", PERL_SCRIPT], mode)
    assert r.stdout == b"33334 816650 50000\n"


@pytest.mark.parametrize("mode", MODES)
def test_xz(mode: str, work: Path) -> None:
    data = work / "data"
    with data.open("wb") as f:
        for i in range(200000):
            f.write(f"line {i} {i * i % 9973}\n".encode())
    r = same_as_bare(["xz", "-T2", "-6", "-c", str(data)], mode)
    assert r.stdout[:6] == b"\xfd7zXZ\x00"


@pytest.mark.parametrize("mode", MODES)
def test_cxx_threads(mode: str) -> None:
    r = same_as_bare([str(HBIN / "cxx_threads")], mode)
    assert len(r.stdout.splitlines()) == 4


@pytest.mark.parametrize("mode", MODES)
def test_fork_exec(mode: str) -> None:
    r = same_as_bare([str(HBIN / "forkexec")], mode)
    assert r.stdout == (b"exec ok: CHILD\nchild exit 0, parent block\nspawn ok\n"
                        b"spawn exit 0\nsystem exit 3\n")


@pytest.mark.parametrize("mode", MODES)
def test_semantics(mode: str) -> None:
    """Every interposed function, libc's semantics kept (the C test)."""
    r = same_as_bare([str(HBIN / "semantics")], mode)
    assert r.returncode == 0
    assert r.stdout.endswith(b"PASS: 0 failure(s)\n")
    assert not any(line.startswith(b"FAIL") for line in r.stdout.splitlines())


@pytest.mark.parametrize("extra", [{"PMM_FAKE_UNMONITORED": "1"}, {}, {"PMM_SAMPLE": "4096"}],
                         ids=["unmonitored", "exact", "sampled"])
def test_bootstrap_arena_blocks(extra: dict[str, str]) -> None:
    """Blocks of the bootstrap arena (what dlsym may allocate while the hook
    starts), freed and reallocated later by the program in each mode, never
    reach libc (which aborts on them): the fast paths skip the arena check
    only while the arena has given out nothing."""
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", **extra)
    r = subprocess.run([str(HBIN / "arena")], env=env, capture_output=True, timeout=TIMEOUT)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"arena: 0 failure(s)\n", b"")


@pytest.mark.parametrize("prog", ["leak", "leak_shim"])
@pytest.mark.parametrize("mode", MODES)
def test_examples(mode: str, prog: str) -> None:
    r = same_as_bare([str(TOP / "examples" / "bin" / prog), "-n", "50"], mode, normalize=no_pid)
    lines = r.stdout.decode().splitlines()
    assert lines[1] == "leak: done 50000"


def test_one_line_without_device() -> None:
    """No /dev/pmm: exactly one line on stderr, the program unaffected."""
    if Path("/dev/pmm").exists():
        pytest.skip("/dev/pmm exists here")
    env = clean_env(LD_PRELOAD=str(HOOK))
    r = subprocess.run([str(HBIN / "cxx_threads")], env=env, capture_output=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0
    lines = r.stderr.decode().splitlines()
    assert lines == ["pmm: cannot open /dev/pmm: no such file (is pmm.ko loaded?) (errno 2); "
                     "allocations pass through to libc"]
    # a child that execs loads the library again: one line per process
    r = subprocess.run(["sh", "-c", "true"], env=env, capture_output=True, timeout=TIMEOUT)
    assert len(r.stderr.decode().splitlines()) == 1


def test_quiet_and_env_errors() -> None:
    """PMM_QUIET=1 silences; odd PMM_* values change nothing."""
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_QUIET="1", PMM_DEPTH="99", PMM_SAMPLE="abc",
                    PMM_UNWIND="bogus")
    r = subprocess.run([str(HBIN / "semantics")], env=env, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0 and r.stderr == b""


def records_sent(log: Path) -> int:
    return sum(len(rs) for _, rs in fake_log_batches(log))


# semantics sends about 700 records exact, 90 at PMM_SAMPLE=4096, a few at 512K
# (a sample point may fall on none of its few MiB: no record at all is a rate too)
@pytest.mark.parametrize("value,most,least", [("512K", 30, 0), ("1M", 30, 0), ("2MiB", 30, 0),
                                              ("4096", 300, 31), ("", 10**6, 500)])
def test_sample_sizes_with_units(tmp_path: Path, value: str, most: int, least: int) -> None:
    """PMM_SAMPLE takes bytes with K, M or G (KiB multiples), the rate the
    number of records sent shows; no line on stderr."""
    log = tmp_path / "log"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="yes", PMM_SAMPLE=value,
                    PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "semantics")], env=env, capture_output=True, timeout=TIMEOUT)
    assert (r.returncode, r.stderr) == (0, b"")
    assert least <= records_sent(log) <= most


def test_bad_settings_say_so_once_each(tmp_path: Path) -> None:
    """A PMM_* value the hook cannot use gets one line on stderr saying what
    it falls back to (a bad PMM_SAMPLE would otherwise mean exact mode, the
    expensive one, unsaid); switches take true/yes/on and false/no/off."""
    log = tmp_path / "log"
    env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="On", PMM_SAMPLE="512X",
                    PMM_QUIET="maybe", PMM_DEPTH="99", PMM_UNWIND="bogus", PMM_BUFFER="-3",
                    PMM_FAKE_LOG=str(log))
    r = subprocess.run([str(HBIN / "semantics")], env=env, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0
    assert r.stderr.decode().splitlines() == [
        "pmm: PMM_QUIET=maybe: not 1, true, yes or on, nor 0, false, no or off; ignored",
        "pmm: PMM_DEPTH=99: not a depth from 1 to 32; depth 1",
        "pmm: PMM_UNWIND=bogus: not fp or eh; frame pointers, then libgcc's unwinder",
        "pmm: PMM_SAMPLE=512X: not a size in bytes (or with K, M or G); exact mode",
        "pmm: PMM_BUFFER=-3: not a number of records; the default",
    ]
    # PMM_START=On started it, in exact mode
    assert records_sent(log) >= 500
    env.update(PMM_QUIET="true")
    r = subprocess.run([str(HBIN / "semantics")], env=env, capture_output=True, timeout=TIMEOUT)
    assert (r.returncode, r.stderr) == (0, b"")
    # a number out of range takes the nearest bound, and says so
    for value in ("10", "100000"):
        env = clean_env(LD_PRELOAD=str(FAKE), PMM_START="1", PMM_BUFFER=value,
                        PMM_FAKE_LOG=str(log))
        r = subprocess.run([str(HBIN / "semantics")], env=env, capture_output=True,
                           timeout=TIMEOUT)
        assert (r.returncode, r.stderr.decode().splitlines()) == (0, [
            f"pmm: PMM_BUFFER={value}: not a number of records from 512 to 32768; "
            "the nearest of the two"])


def test_exports_only_interposed_symbols() -> None:
    """-fvisibility=hidden: the library exports the hooks, and the registry pmm-scan
    reads, and nothing else."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--defined-only", str(HOOK)], capture_output=True,
                         text=True, check=True).stdout
    data = sorted(line.split()[-1] for line in out.splitlines() if " T " not in line)
    assert data == ["pmm_scan_registry"]  # what pmm-scan reads (hooklib/scanreg.h)
    names = sorted(line.split()[-1] for line in out.splitlines() if " T " in line)
    assert names == sorted([
        "aligned_alloc", "calloc", "free", "malloc", "malloc_usable_size", "memalign",
        "mmap", "mmap64", "mremap", "munmap", "pmm_attach", "pmm_flush", "pmm_src_calloc",
        "pmm_src_free", "pmm_src_malloc", "pmm_src_realloc", "posix_memalign", "pvalloc",
        "realloc", "reallocarray", "valloc",
    ])
