"""Measures the two symbolizer backends on a real object (a benchmark).

    .venv/bin/python bench/symbolize_bench.py [OBJECT] [N]   (bench/host_pmctl.sh)

Picks N (default 100) addresses inside the object's functions (from its
symbol table, spread over the whole text), resolves them with binutils
addr2line (one batched process) and with pyelftools (cold: a new instance,
so the DWARF parsing is counted), and prints the wall times and how many
results agree. The default object is this Python's libpython (built with -g).
"""

from __future__ import annotations

import sys
import sysconfig
import time
from pathlib import Path

from pmm.symbolize import Addr2line, PyElfTools, SourceLoc


def default_object() -> str:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    name = sysconfig.get_config_var("INSTSONAME") or ""
    p = Path(libdir) / name
    return str(p) if p.exists() else sys.executable


def pick_addresses(path: str, n: int) -> list[int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        funcs = []
        for secname in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(secname)
            if sec is None:
                continue
            for s in sec.iter_symbols():  # type: ignore[attr-defined]
                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] and s["st_size"] > 8:
                    funcs.append((s["st_value"], s["st_size"]))
            if funcs:
                break
    funcs = sorted(set(funcs))
    step = max(1, len(funcs) // n)
    return [lo + size // 2 for lo, size in funcs[::step][:n]]


def timed(
    backend: Addr2line | PyElfTools, path: str, addrs: list[int]
) -> tuple[float, list[SourceLoc]]:
    t0 = time.perf_counter()
    res = backend.resolve(path, addrs)
    return time.perf_counter() - t0, res


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else default_object()
    n = int(args[1]) if len(args) > 1 else 100
    addrs = pick_addresses(path, n)
    size_mb = Path(path).stat().st_size / 1e6
    print(f"object: {path} ({size_mb:.1f} MB), {len(addrs)} addresses")
    t_a, r_a = timed(Addr2line(), path, addrs)
    pe = PyElfTools()
    t_p, r_p = timed(pe, path, addrs)
    t_p2, _ = timed(pe, path, addrs)
    same_line = sum(1 for a, b in zip(r_a, r_p, strict=True) if a.line == b.line)
    same_func = sum(1 for a, b in zip(r_a, r_p, strict=True) if a.func == b.func)
    known_a = sum(1 for r in r_a if r.line)
    known_p = sum(1 for r in r_p if r.line)
    print(f"addr2line  (one batched process): {t_a * 1000:8.1f} ms, {known_a} with file:line")
    print(f"pyelftools (cold, DWARF parsed):  {t_p * 1000:8.1f} ms, {known_p} with file:line")
    print(f"pyelftools (warm, same instance): {t_p2 * 1000:8.1f} ms")
    print(f"ratio pyelftools cold / addr2line: {t_p / t_a:.1f}x")
    print(f"same line: {same_line}/{len(addrs)}; same function: {same_func}/{len(addrs)} "
          "(addr2line names the inlined function, this pyelftools code the outer one)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
