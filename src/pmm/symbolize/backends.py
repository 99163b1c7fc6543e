"""Back-ends that resolve an object's ELF virtual addresses to function, file
and line: binutils addr2line (the default) and pyelftools (optional: the
`elf` extra, pip install 'pmm[elf]'). Without either, frames are named by
object and offset, and one warning says what to install."""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger("pmm.symbolize")

NO_BACKEND = ("cannot name functions and source lines: neither addr2line (binutils) nor "
              "pyelftools is installed; install binutils, or pyelftools with "
              "pip install 'pmm[elf]' (frames show object+offset meanwhile)")


@dataclass(frozen=True)
class SourceLoc:
    """The function, file and line of one address (None where unknown)."""

    func: str | None
    file: str | None
    line: int | None


class Backend(Protocol):
    """What resolves an object's vaddrs (one SourceLoc each, in order)."""

    name: str

    def available(self) -> bool:
        """Whether the back-end can run on this machine."""
        ...

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """The location of each of vaddrs (virtual addresses of the ELF object at
        path), in order; unknown ones as SourceLoc(None, None, None)."""
        ...


def _parse_fileline(s: str) -> tuple[str | None, int | None]:
    s = s.split(" (discriminator", 1)[0].strip()
    if s.startswith("??"):
        return None, None
    file, _, line = s.rpartition(":")
    if not file:
        return None, None
    try:
        n = int(line)
    except ValueError:
        return file, None
    return file, (n if n > 0 else None)


# addr2line -a's address line, which starts each address's answer
_ADDR_LINE = re.compile(r"0x[0-9a-f]+")


def _parse_inlined(out: str) -> dict[int, tuple[SourceLoc, ...]]:
    """`addr2line -a -f -i` output: each address line ('0x...') followed by
    (function, file:line) pairs, innermost first."""
    chains: dict[int, tuple[SourceLoc, ...]] = {}
    addr: int | None = None
    locs: list[SourceLoc] = []
    lines = out.splitlines()
    i = 0
    while i < len(lines):
        text = lines[i]
        if _ADDR_LINE.fullmatch(text):
            if addr is not None:
                chains[addr] = tuple(locs)
            addr, locs = int(text, 16), []
            i += 1
            continue
        func = None if text == "??" else text
        file, line = _parse_fileline(lines[i + 1]) if i + 1 < len(lines) else (None, None)
        if func or file:
            locs.append(SourceLoc(func, file, line))
        i += 2
    if addr is not None:
        chains[addr] = tuple(locs)
    return chains


@runtime_checkable
class InliningBackend(Backend, Protocol):
    """A back-end that also lists the inlined calls at an address (addr2line -i)."""

    def resolve_inlined(self, path: str, vaddrs: Sequence[int]) -> list[tuple[SourceLoc, ...]]:
        """Per vaddr, its locations innermost inlined call first."""
        ...


# a huge object's debug info may take long: not longer than this (pmd waits)
ADDR2LINE_TIMEOUT_S = 120


class Addr2line:
    """binutils addr2line, batched: one process per object and batch."""

    name = "addr2line"

    def __init__(self, exe: str | None = None) -> None:
        self.exe = exe or shutil.which("addr2line") or "addr2line"

    def available(self) -> bool:
        """Whether the addr2line program is there."""
        return shutil.which(self.exe) is not None or Path(self.exe).exists()

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """One addr2line run over all of vaddrs in the object at path; all
        unknown if it cannot run or takes longer than ADDR2LINE_TIMEOUT_S."""
        if not vaddrs:
            return []
        try:
            r = subprocess.run(
                [self.exe, "-f", "-C", "-e", path, *(f"0x{a:x}" for a in vaddrs)],
                capture_output=True,
                text=True,
                check=False,
                timeout=ADDR2LINE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return [SourceLoc(None, None, None)] * len(vaddrs)
        lines = r.stdout.splitlines()
        out: list[SourceLoc] = []
        for i in range(len(vaddrs)):
            func = lines[2 * i] if 2 * i < len(lines) else "??"
            fl = lines[2 * i + 1] if 2 * i + 1 < len(lines) else "??:0"
            file, line = _parse_fileline(fl)
            out.append(SourceLoc(None if func == "??" else func, file, line))
        return out

    def resolve_inlined(self, path: str, vaddrs: Sequence[int]) -> list[tuple[SourceLoc, ...]]:
        """Each of vaddrs with its inlined calls: `addr2line -a -f -C -i`, the
        addresses on stdin; per address its locations innermost first, the
        last being the function it was compiled into (one unknown location if
        nothing is known; all unknown if addr2line cannot run or times out)."""
        unknown: tuple[SourceLoc, ...] = (SourceLoc(None, None, None),)
        if not vaddrs:
            return []
        try:
            r = subprocess.run(
                [self.exe, "-a", "-f", "-C", "-i", "-e", path],
                input="".join(f"0x{a:x}\n" for a in vaddrs),
                capture_output=True,
                text=True,
                check=False,
                timeout=ADDR2LINE_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return [unknown] * len(vaddrs)
        chains = _parse_inlined(r.stdout)
        return [chains.get(a) or unknown for a in vaddrs]


class PyElfTools:
    """pyelftools: .debug_aranges -> CU -> line program; .symtab for names."""

    name = "pyelftools"

    def __init__(self) -> None:
        self._objs: dict[str, Any] = {}

    def available(self) -> bool:
        """pyelftools is installed (it is optional: the `elf` extra)."""
        try:
            import elftools.elf.elffile  # noqa: F401
        except ImportError:
            return False
        return True

    def _open(self, path: str) -> Any:
        if path not in self._objs:
            from elftools.elf.elffile import ELFFile

            f = open(path, "rb")  # noqa: SIM115 - kept open for lazy DWARF parsing
            elf = ELFFile(f)
            dwarf = elf.get_dwarf_info() if elf.has_dwarf_info() else None
            syms: list[tuple[int, int, str]] = []
            for secname in (".symtab", ".dynsym"):
                sec = elf.get_section_by_name(secname)
                if sec is None:
                    continue
                for s in sec.iter_symbols():  # type: ignore[attr-defined]
                    if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]:
                        syms.append((s["st_value"], s["st_size"], s.name))
                if syms:
                    break
            syms.sort()
            aranges = dwarf.get_aranges() if dwarf is not None else None
            self._objs[path] = (f, dwarf, aranges, syms, {})
        return self._objs[path]

    def _lines_for_cu(self, dwarf: Any, cu: Any, cache: dict[int, Any]) -> Any:
        if cu.cu_offset in cache:
            return cache[cu.cu_offset]
        lp = dwarf.line_program_for_CU(cu)
        rows: list[tuple[int, str, int]] = []
        if lp is not None:
            version = lp.header["version"]
            files = lp.header["file_entry"]
            dirs = lp.header["include_directory"]
            for entry in lp.get_entries():
                st = entry.state
                if st is None or st.end_sequence:
                    if st is not None:
                        rows.append((st.address, "", 0))
                    continue
                idx = st.file if version >= 5 else st.file - 1
                fname = "??"
                if 0 <= idx < len(files):
                    fe = files[idx]
                    fname = fe.name.decode() if isinstance(fe.name, bytes) else str(fe.name)
                    di = fe.dir_index if version >= 5 else fe.dir_index - 1
                    if not fname.startswith("/") and 0 <= di < len(dirs):
                        d = dirs[di]
                        d = d.decode() if isinstance(d, bytes) else str(d)
                        fname = f"{d}/{fname}"
                rows.append((st.address, fname, st.line))
        rows.sort(key=lambda r: r[0])
        # function ranges from the CU's DIEs
        funcs: list[tuple[int, int, str]] = []
        for die in cu.iter_DIEs():
            if die.tag != "DW_TAG_subprogram":
                continue
            lo = die.attributes.get("DW_AT_low_pc")
            hi = die.attributes.get("DW_AT_high_pc")
            nm = die.attributes.get("DW_AT_name")
            if lo is None or hi is None or nm is None:
                continue
            low = lo.value
            high = hi.value if hi.form == "DW_FORM_addr" else low + hi.value
            funcs.append((low, high, nm.value.decode()))
        cache[cu.cu_offset] = (rows, funcs)
        return cache[cu.cu_offset]

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """Each vaddr's function (from DWARF, else the symbol table), file and
        line; all unknown if the object cannot be parsed."""
        try:
            _f, dwarf, aranges, syms, cache = self._open(path)
        except Exception:  # noqa: BLE001 - any parse failure: unknown
            return [SourceLoc(None, None, None)] * len(vaddrs)
        out: list[SourceLoc] = []
        sym_addrs = [s[0] for s in syms]
        for a in vaddrs:
            func: str | None = None
            file: str | None = None
            line: int | None = None
            if dwarf is not None:
                cu_off = aranges.cu_offset_at_addr(a) if aranges is not None else None
                if cu_off is not None:
                    cu = dwarf.get_CU_at(cu_off)
                    rows, funcs = self._lines_for_cu(dwarf, cu, cache)
                    addrs = [r[0] for r in rows]
                    i = bisect.bisect_right(addrs, a) - 1
                    if i >= 0 and rows[i][2]:
                        file, line = rows[i][1], rows[i][2]
                    for lo, hi, nm in funcs:
                        if lo <= a < hi:
                            func = nm
                            break
            if func is None and syms:
                i = bisect.bisect_right(sym_addrs, a) - 1
                if i >= 0 and syms[i][0] <= a < syms[i][0] + max(syms[i][1], 1):
                    func = syms[i][2]
            out.append(SourceLoc(func, file, line))
        return out


class NoBackend:
    """Neither addr2line nor pyelftools is installed: nothing is resolved."""

    name = "none"

    def available(self) -> bool:
        """False: there is nothing to run."""
        return False

    def resolve(self, path: str, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """An unknown location for each address."""
        return [SourceLoc(None, None, None)] * len(vaddrs)


_said_no_backend = False


def warn_no_backend() -> None:
    """Logs NO_BACKEND once per process (pmctl: on stderr; pmd: in its log)."""
    global _said_no_backend
    if not _said_no_backend:
        _said_no_backend = True
        log.warning(NO_BACKEND)


def make_backend(name: str | None = None) -> Backend:
    """$PMM_SYMBOLIZER ("addr2line" or "pyelftools"); addr2line by default,
    pyelftools when binutils is not installed, NoBackend when neither is."""
    name = name or os.environ.get("PMM_SYMBOLIZER") or "addr2line"
    elf = PyElfTools()
    if name == "pyelftools":
        if elf.available():
            return elf
        log.warning("the pyelftools symbolizer was asked for (PMM_SYMBOLIZER=pyelftools) but "
                    "pyelftools is not installed (pip install 'pmm[elf]'): using addr2line")
    a = Addr2line()
    if a.available():
        return a
    return elf if elf.available() else NoBackend()


def demangle(names: Iterable[str]) -> dict[str, str]:
    """C++ symbol names ('_Znwm') demangled ('operator new(unsigned long)') by
    binutils' c++filt, one run for all; names it cannot demangle, and all of
    them without c++filt, map to themselves."""
    out = {n: n for n in names}
    todo = sorted(n for n in out if n.startswith("_Z"))
    exe = shutil.which("c++filt")
    if not todo or exe is None:
        return out
    try:
        r = subprocess.run([exe], input="\n".join(todo) + "\n", capture_output=True,
                           text=True, check=False, timeout=ADDR2LINE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return out
    got = r.stdout.splitlines()
    if r.returncode == 0 and len(got) == len(todo):
        out.update(zip(todo, got, strict=True))
    return out
