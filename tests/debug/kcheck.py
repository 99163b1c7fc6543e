"""The debug kernel's verdict: scans the kernel log and kmemleak's report for
the bug finders' findings (KASAN, UBSAN, lockdep, sleeping in atomic context,
BUG, WARNING, kmemleak reports from our modules). One checker for both the
in-guest suite and the harness's selftest (tests/debug/guest.sh).

  kcheck.py live --results DIR --label NAME [--expect clean|kasan|kmemleak]
      inside the debug VM, as root: scans kmemleak (twice, as it needs),
      saves NAME-dmesg.txt, NAME-kmemleak.txt, NAME-findings.txt in DIR,
      prints the findings; exit 1 if there are any (or, with --expect, if
      the verdict is not the expected one).
  kcheck.py reset
      inside the VM: clears the kernel log and marks kmemleak's current
      reports as seen, so the next `live` judges only what happens after.
  kcheck.py files --dmesg FILE [--kmemleak FILE]
      the same verdict on saved files (host tests, re-checks).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KMEMLEAK = Path("/sys/kernel/debug/kmemleak")
OUR_MODULES = ("pmm", "pmm_badmod")
# kmemleak reports only objects older than 5 s; the second scan finds what
# the first one saw as still referenced from a stale stack slot.
SCAN_PAUSE_S = 6.0

# (category, pattern) for the kernel log, first match wins per line.
DMESG_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("KASAN", re.compile(r"\bKASAN\b")),
    ("UBSAN", re.compile(r"\bUBSAN\b")),
    (
        "lockdep",
        re.compile(
            r"possible circular locking dependency|inconsistent lock state"
            r"|possible recursive locking|suspicious RCU usage|bad unlock balance"
            r"|lock held when returning to user space|held lock freed|irq lock inversion"
        ),
    ),
    (
        "atomic-sleep",
        re.compile(r"sleeping function called from invalid context|scheduling while atomic"),
    ),
    ("list-corruption", re.compile(r"list_(?:add|del) corruption")),
    ("BUG", re.compile(r"\bBUG\b")),
    ("WARNING", re.compile(r"\bWARNING\b")),
    ("Oops", re.compile(r"\bOops\b|general protection fault|Kernel panic")),
    ("kmemleak", re.compile(r"kmemleak: .*(?:disabled|[Cc]annot|fail|overflow)")),
)

_FRAME = re.compile(r"^\s*\[<[0-9a-fx]+>\]\s+(?P<sym>\S+)(?:\s+\[(?P<mod>[\w-]+)\])?\s*$")
_UNRESOLVED = re.compile(r"^0x[0-9a-f]+$")


@dataclass(frozen=True)
class Finding:
    category: str
    line: str

    def __str__(self) -> str:
        return f"{self.category}: {self.line}"


def scan_dmesg(text: str) -> list[Finding]:
    """Every kernel log line a bug finder (or BUG/WARN) wrote."""
    found = []
    for line in text.splitlines():
        for category, rule in DMESG_RULES:
            if rule.search(line):
                found.append(Finding(category, line.rstrip()))
                break
    return found


def kmemleak_reports(text: str) -> list[list[str]]:
    """Splits kmemleak's report into one list of lines per leaked object."""
    reports: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("unreferenced object"):
            reports.append([line])
        elif reports and line.strip():
            reports[-1].append(line)
    return reports


def report_is_ours(report: list[str], modules: tuple[str, ...] = OUR_MODULES) -> bool:
    """A leak is ours when a frame of its allocation backtrace is in one of
    our modules: named [pmm] / [pmm_badmod], or left unresolved, which means
    its code is gone: the module was unloaded (no other module is ever
    loaded in the test VM)."""
    for line in report:
        m = _FRAME.match(line)
        if not m:
            continue
        if m.group("mod") in modules or _UNRESOLVED.match(m.group("sym")):
            return True
    return False


def scan_kmemleak(
    text: str, modules: tuple[str, ...] = OUR_MODULES
) -> tuple[list[Finding], list[list[str]]]:
    """(findings for our leaks, other reports: the kernel's, shown not judged)."""
    found: list[Finding] = []
    others: list[list[str]] = []
    for report in kmemleak_reports(text):
        if report_is_ours(report, modules):
            found.extend(Finding("kmemleak", line) for line in report)
        else:
            others.append(report)
    return found, others


def verdict(findings: list[Finding]) -> str:
    """clean, or the categories found, in order, joined by '+'."""
    cats: list[str] = []
    for f in findings:
        if f.category not in cats:
            cats.append(f.category)
    return "+".join(cats) if cats else "clean"


def expected(findings: list[Finding], expect: str) -> bool:
    if expect == "clean":
        return not findings
    return any(f.category.lower() == expect.lower() for f in findings)


def _kmemleak_write(cmd: str) -> None:
    with KMEMLEAK.open("w") as f:
        f.write(cmd)


def _ensure_debugfs() -> None:
    if not KMEMLEAK.exists():
        subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"], check=False)
    if not KMEMLEAK.exists():
        raise SystemExit(f"kcheck: {KMEMLEAK} is missing: not a kmemleak kernel")


def live(results: Path, label: str, modules: tuple[str, ...]) -> list[Finding]:
    _ensure_debugfs()
    findings: list[Finding] = []
    leak_text = ""
    try:
        _kmemleak_write("scan")
        time.sleep(SCAN_PAUSE_S)
        _kmemleak_write("scan")
        leak_text = KMEMLEAK.read_text()
    except OSError as e:
        # kmemleak turns itself off on an internal error; then it proves nothing.
        findings.append(Finding("kmemleak", f"cannot scan: {e} (kmemleak disabled?)"))
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{label}-dmesg.txt").write_text(dmesg)
    (results / f"{label}-kmemleak.txt").write_text(leak_text)
    findings += scan_dmesg(dmesg)
    ours, others = scan_kmemleak(leak_text, modules)
    findings += ours
    (results / f"{label}-findings.txt").write_text("".join(f"{f}\n" for f in findings))
    if others:
        print(f"kcheck: {label}: {len(others)} kmemleak report(s) not from our modules "
              f"(the kernel's own; not judged), see {label}-kmemleak.txt")
    return findings


def reset() -> None:
    _ensure_debugfs()
    subprocess.run(["dmesg", "-C"], check=True)
    _kmemleak_write("clear")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lv = sub.add_parser("live")
    lv.add_argument("--results", type=Path, required=True)
    lv.add_argument("--label", required=True)
    lv.add_argument("--expect", choices=("clean", "kasan", "kmemleak"))
    lv.add_argument("--modules", default=",".join(OUR_MODULES))
    sub.add_parser("reset")
    fl = sub.add_parser("files")
    fl.add_argument("--dmesg", type=Path, required=True)
    fl.add_argument("--kmemleak", type=Path)
    fl.add_argument("--modules", default=",".join(OUR_MODULES))
    args = ap.parse_args(argv)

    if args.cmd == "reset":
        reset()
        return 0
    modules = tuple(m for m in args.modules.split(",") if m)
    label = "files"
    if args.cmd == "live":
        label = args.label
        findings = live(args.results, label, modules)
    else:
        findings = scan_dmesg(args.dmesg.read_text(errors="replace"))
        if args.kmemleak:
            findings += scan_kmemleak(args.kmemleak.read_text(errors="replace"), modules)[0]
    for f in findings:
        print(f"kcheck: {label}: {f}")
    v = verdict(findings)
    expect = getattr(args, "expect", None)
    if expect is None:
        print(f"kcheck: {label}: {'clean' if v == 'clean' else 'FAILED: ' + v}")
        return 0 if v == "clean" else 1
    ok = expected(findings, expect)
    print(f"kcheck: {label}: expected {expect}, got {v}: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
