#!/usr/bin/env python3
"""The C sources' include graph, by module, and its circles (issue 43).

A module is a .c file and the .h of the same name beside it (either may be
missing); module A depends on module B when A's .c or .h includes B's
header. The graph's strongly connected components of more than one module
are its circles: each is printed, and any that is not an owner/teardown
pair listed in ALLOWED makes the exit status 1 (`make check` runs this).

A circle can hide in a header that declares other files' functions, which
then include it alone; so, in OWN_HEADERS (the library, pmm-inject and
pmm-scan), every function a .c file defines and does not keep static must be
declared in its own .h, but for the exceptions in ELSEWHERE. Not yet in
kmod/, whose pmm_int.h declares every file's functions.

    scripts/include-graph.py [--graph] [DIR...]   (default: hooklib kmod)

--graph prints every module's dependencies too.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
DIRS = ("hooklib", "kmod")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# A function's definition in the kernel's style: its type and name at the
# start of a line (attributes allowed), its parameters, then "{" alone on
# the next line.
DEFINITION = re.compile(
    r"^(?P<head>(?:__attribute__\(\(.*?\)\)\s*)*[A-Za-z_][\w \t*]*?)\b(?P<name>\w+)"
    r"\((?P<params>[^;{}]*?)\)\s*\n\{",
    re.MULTILINE,
)
# Where each module's functions must be declared in its own header: the
# library's files, pmm-inject's and pmm-scan's.
OWN_HEADERS = ("hooklib/", "hooklib/inject/", "hooklib/scan/")

# Circles that are real: one module owns a thing that the other tears down,
# each calling the other. Keyed by the circle's modules, with why.
ALLOWED: dict[frozenset[str], str] = {
    frozenset({"hooklib/control", "hooklib/scanreg"}): (
        "scanreg.c owns the registry pmm-scan reads, which publishes control.c's "
        "fork marker; control.c's fork child handler clears the registry's "
        "entries of the parent's other threads (scanreg_fork)"
    ),
}


# Functions declared outside their file's header, and where, with why.
ELSEWHERE: dict[str, tuple[str, str]] = {
    name: ("hooklib/mode.h", "a jump target mode.c stores in g_fast before any constructor")
    for name in ("hook_free", "malloc_spent", "free_sampled", "free_exact", "malloc_exact")
}


def module_of(path: Path) -> str:
    """A file's module: its path from the top, without the extension."""
    return path.relative_to(TOP).with_suffix("").as_posix()


def sources(dirs: list[str]) -> list[Path]:
    files: list[Path] = []
    for d in dirs:
        files += sorted((TOP / d).rglob("*.[ch]"))
    return files


def graph(files: list[Path]) -> dict[str, set[str]]:
    """Each module's dependencies: the modules whose headers it includes
    (only headers of the tree: system headers are left out)."""
    deps: dict[str, set[str]] = {module_of(f): set() for f in files}
    for f in files:
        for name in INCLUDE.findall(f.read_text(errors="replace")):
            target = (f.parent / name).resolve()
            if target.is_file() and TOP in target.parents:
                dep = module_of(target)
                if dep != module_of(f):
                    deps[module_of(f)].add(dep)
                    deps.setdefault(dep, set())
    return deps


def undeclared(files: list[Path]) -> list[str]:
    """Functions a .c file defines, not static, not exported (PMM_EXPORT:
    the C library's names, or pmm_hooks.h's), that its own header does not
    declare."""
    found = []
    for f in files:
        if f.suffix != ".c" or f.parent.relative_to(TOP).as_posix() + "/" not in OWN_HEADERS:
            continue
        header = f.with_suffix(".h")
        declared = header.read_text() if header.is_file() else ""
        for m in DEFINITION.finditer(f.read_text(errors="replace")):
            head, name = m.group("head"), m.group("name")
            if re.search(r"\b(static|PMM_EXPORT)\b", head) or name == "main":
                continue
            where = ELSEWHERE.get(name)
            if where and re.search(rf"\b{name}\(", (TOP / where[0]).read_text()):
                continue
            if not re.search(rf"\b{name}\(", declared):
                found.append(f"{module_of(f)}.c: {name} is not declared in {header.name}")
    return found


def components(deps: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion
    limit), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(deps):
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(deps[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                found.append(sorted(component))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", default=list(DIRS), help="directories, from the top")
    parser.add_argument("--graph", action="store_true", help="print every module's dependencies")
    args = parser.parse_args()
    deps = graph(sources(args.dirs))
    if args.graph:
        for mod in sorted(deps):
            print(f"{mod}: {' '.join(sorted(deps[mod]))}")
    bad = 0
    circles = [c for c in components(deps) if len(c) > 1]
    for circle in sorted(circles):
        why = ALLOWED.get(frozenset(circle))
        if why:
            print(f"allowed circle: {' <-> '.join(circle)} ({why})")
        else:
            print(f"CIRCLE: {' <-> '.join(circle)}")
            bad += 1
    print(f"{len(deps)} modules in {' '.join(args.dirs)}: {len(circles)} circles, "
          f"{bad} not allowed")
    missing = undeclared(sources(args.dirs))
    for line in missing:
        print(f"UNDECLARED: {line}")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
