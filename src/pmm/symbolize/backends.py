"""Back-ends that resolve an object's ELF virtual addresses to function, file
and line: binutils addr2line (the default) and pyelftools (optional: the
`elf` extra; pmm.installed says how to install it). Without either, frames
are named by object and offset, and one warning says what to install.

A back-end is given the file open (`pmm.symbolize.opening.OpenFile`; a path
is opened as `open_path` does). addr2line reads it as /proc/self/fd/N, in a
child made unprivileged when someone else wrote the file (`sandbox`), with
a time budget: ADDR2LINE_TIMEOUT_S for a file of root's or ours alone,
UNTRUSTED_TIMEOUT_S for any other; a run that gives nothing raises
`ToolFailed` saying why."""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pmm.installed import python_hint
from pmm.symbolize import sandbox
from pmm.symbolize.elf import ElfFile, MalformedElf
from pmm.symbolize.opening import OpenFile, open_path
from pmm.symbolize.sandbox import ToolFailed

log = logging.getLogger("pmm.symbolize")

NO_BACKEND = ("cannot name functions and source lines: neither addr2line (binutils) nor "
              "pyelftools is installed; install binutils, or pyelftools with "
              f"{python_hint('pyelftools', 'python3-pyelftools', 'elf')} (frames show "
              "object+offset meanwhile)")


@dataclass(frozen=True)
class SourceLoc:
    """The function, file and line of one address (None where unknown)."""

    func: str | None
    file: str | None
    line: int | None


# an ELF file to resolve addresses in: open (how the symbolizer gives it), or a
# path of the caller's own
ElfInput = OpenFile | str


def as_open(obj: ElfInput) -> OpenFile:
    """obj, opened if it is a path of the caller's (`open_path`: a regular file only)."""
    return obj if isinstance(obj, OpenFile) else open_path(obj)


class Backend(Protocol):
    """What resolves an object's vaddrs (one SourceLoc each, in order)."""

    name: str

    def available(self) -> bool:
        """Whether the back-end can run on this machine."""
        ...

    def resolve(self, path: ElfInput, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """The location of each of vaddrs (virtual addresses of the ELF object
        `path`), in order; unknown ones as SourceLoc(None, None, None).
        OSError (ToolFailed) when nothing could be learnt of the file."""
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

    def resolve_inlined(self, path: ElfInput, vaddrs: Sequence[int]
                        ) -> list[tuple[SourceLoc, ...]]:
        """Per vaddr, its locations innermost inlined call first."""
        ...


# a huge object's debug info may take long: not longer than this for a file of
# root's or ours; one someone else wrote gets a few seconds
ADDR2LINE_TIMEOUT_S = 120
UNTRUSTED_TIMEOUT_S = 5.0


def unsafe_links(elf: ElfFile) -> str | None:
    """Why binutils must not read this file, which someone else wrote: its
    .gnu_debuglink or .gnu_debugaltlink names a path that, joined to the
    directory binutils looks in (/proc/self/fd/, /usr/lib/debug/...), leaves
    it ('..') or names one of the child's descriptors; None if neither does."""
    try:
        links = [(".gnu_debuglink", link[0]) for link in [elf.debuglink] if link]
        links += [(".gnu_debugaltlink", alt[0]) for alt in [elf.debugaltlink] if alt]
    except MalformedElf as e:
        return f"malformed ELF: {e}"
    for section, name in links:
        parts = [p for p in name.split("/") if p]
        if ".." in parts or (parts and parts[0].isdigit()):
            return f"its {section} names {name!r} (not followed)"
    return None


def run_binutils(f: OpenFile, argv_before: Sequence[str], argv_after: Sequence[str]) -> str:
    """A binutils program's stdout on file f: argv_before, f's path for it,
    argv_after. A file of root's or ours alone is read as it is; any other
    in an unprivileged child (`sandbox`), within UNTRUSTED_TIMEOUT_S, and
    not at all if its debug links lead out (`unsafe_links`)."""
    trusted = f.owner_trusted
    if not trusted:
        why = unsafe_links(ElfFile.of(f))
        if why is not None:
            raise ToolFailed(f"{f.path}: {why}")
    path = f.arg_path if trusted and f.arg_path else f.tool_path
    try:
        return sandbox.run(
            [*argv_before, path, *argv_after],
            timeout=ADDR2LINE_TIMEOUT_S if trusted else UNTRUSTED_TIMEOUT_S,
            pass_fds=(f.fd,) if path == f.tool_path else (), untrusted=not trusted,
            run_as=sandbox.run_as_for(f.st.st_uid, f.st.st_gid))
    except ToolFailed as e:
        raise type(e)(f"{f.path}: {e}") from None


class Addr2line:
    """binutils addr2line, batched: one process per object and batch."""

    name = "addr2line"

    def __init__(self, exe: str | None = None) -> None:
        self.exe = exe or shutil.which("addr2line") or "addr2line"

    def available(self) -> bool:
        """Whether the addr2line program is there."""
        return shutil.which(self.exe) is not None or Path(self.exe).exists()

    def _exe(self) -> str:
        return shutil.which(self.exe) or self.exe

    def resolve(self, path: ElfInput, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """One addr2line run over all of vaddrs in the object; ToolFailed if
        it cannot run or gives no answer in time (`run_binutils`)."""
        if not vaddrs:
            return []
        out = run_binutils(as_open(path), [self._exe(), "-f", "-C", "-e"],
                           [f"0x{a:x}" for a in vaddrs])
        lines = out.splitlines()
        locs: list[SourceLoc] = []
        for i in range(len(vaddrs)):
            func = lines[2 * i] if 2 * i < len(lines) else "??"
            fl = lines[2 * i + 1] if 2 * i + 1 < len(lines) else "??:0"
            file, line = _parse_fileline(fl)
            locs.append(SourceLoc(None if func == "??" else func, file, line))
        return locs

    def resolve_inlined(self, path: ElfInput, vaddrs: Sequence[int]
                        ) -> list[tuple[SourceLoc, ...]]:
        """Each of vaddrs with its inlined calls: `addr2line -a -f -C -i`; per
        address its locations innermost first, the last being the function
        it was compiled into (one unknown location if nothing is known);
        ToolFailed if it cannot run or gives no answer in time."""
        unknown: tuple[SourceLoc, ...] = (SourceLoc(None, None, None),)
        if not vaddrs:
            return []
        out = run_binutils(as_open(path), [self._exe(), "-a", "-f", "-C", "-i", "-e"],
                           [f"0x{a:x}" for a in vaddrs])
        chains = _parse_inlined(out)
        return [chains.get(a) or unknown for a in vaddrs]


class PyElfTools:
    """pyelftools: .debug_aranges -> CU -> line program; .symtab for names."""

    name = "pyelftools"

    def __init__(self) -> None:
        self._objs: dict[tuple[int, ...], Any] = {}

    def available(self) -> bool:
        """pyelftools is installed (it is optional: the `elf` extra)."""
        try:
            import elftools.elf.elffile  # noqa: F401
        except ImportError:
            return False
        return True

    def _open(self, path: ElfInput) -> Any:
        opened = as_open(path)
        key = opened.identity
        if key not in self._objs:
            from elftools.elf.elffile import ELFFile

            # kept open for lazy DWARF parsing
            f = os.fdopen(os.dup(opened.fd), "rb")
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
            self._objs[key] = (f, dwarf, aranges, syms, {})
        return self._objs[key]

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

    def resolve(self, path: ElfInput, vaddrs: Sequence[int]) -> list[SourceLoc]:
        """Each vaddr's function (from DWARF, else the symbol table), file and
        line; all unknown if the object cannot be parsed. ToolFailed for a
        file someone else wrote: pyelftools parses in this process, which
        may be privileged, with no time budget (addr2line reads such a file
        unprivileged)."""
        opened = as_open(path)
        if not opened.owner_trusted:
            raise ToolFailed(f"{opened.path}: pyelftools does not read a file someone else "
                             "wrote (binutils' addr2line does, unprivileged)")
        try:
            _f, dwarf, aranges, syms, cache = self._open(opened)
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

    def resolve(self, path: ElfInput, vaddrs: Sequence[int]) -> list[SourceLoc]:
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
                    "pyelftools is not installed "
                    f"({python_hint('pyelftools', 'python3-pyelftools', 'elf')}): "
                    "using addr2line")
    a = Addr2line()
    if a.available():
        return a
    return elf if elf.available() else NoBackend()


def demangle(names: Iterable[str]) -> dict[str, str]:
    """C++ symbol names ('_Znwm') demangled ('operator new(unsigned long)') by
    binutils' c++filt, one run for all, unprivileged (the names come from
    files others wrote; `sandbox`) within UNTRUSTED_TIMEOUT_S; names it cannot
    demangle, and all of them without c++filt, map to themselves."""
    out = {n: n for n in names}
    todo = sorted(n for n in out if n.startswith("_Z") and "\n" not in n)
    exe = shutil.which("c++filt")
    if not todo or exe is None:
        return out
    try:
        text = sandbox.run([exe], timeout=UNTRUSTED_TIMEOUT_S, untrusted=True,
                           run_as=sandbox.nobody(), input_text="\n".join(todo) + "\n")
    except ToolFailed as e:
        log.debug("c++filt: %s", e)
        return out
    got = text.splitlines()
    if len(got) == len(todo):
        out.update(zip(todo, got, strict=True))
    return out
