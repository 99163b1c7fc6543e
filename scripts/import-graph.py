#!/usr/bin/env python3
"""The Python library's import graph, by module, and its circles (issue 43).

Module A depends on module B when A imports B anywhere: at the top, in a
function (a deferred import is still a dependency) or in a try block; only
imports under `if TYPE_CHECKING:` are left out (annotations, never run).
Each strongly connected component of more than one module is a circle: it
is printed, and makes the exit status 1 (`make check` runs this). pmctl/
and pmd/ import the library and never each other (tests/host checks that).

    scripts/import-graph.py [--graph] [SRC]   (default: src)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent


def modules(src: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every .py under src."""
    out = {}
    for f in sorted(src.rglob("*.py")):
        parts = f.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules `name` imports (outside `if TYPE_CHECKING:`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(m for a in node.names if (m := owner(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    # `from pkg import sub` imports the submodule when there is one
                    m = owner(f"{base}.{a.name}") if f"{base}.{a.name}" in known else owner(base)
                    if m:
                        found.add(m)
            for field in ("body", "orelse", "handlers", "finalbody"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.stmt)] +
                          [s for h in child if isinstance(h, ast.ExceptHandler) for s in h.body])

    visit(ast.parse(path.read_text(), str(path)).body)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", action="store_true", help="print every module's imports")
    ap.add_argument("src", nargs="?", default=str(TOP / "src"))
    args = ap.parse_args()
    known = modules(Path(args.src))
    graph = {name: imports(name, path, known) for name, path in known.items()}
    if args.graph:
        for name in sorted(graph):
            print(f"{name}: {' '.join(sorted(graph[name]))}")
    found = circles(graph)
    for comp in found:
        print("import circle: " + " <-> ".join(comp))
    print(f"import-graph: {len(graph)} modules, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
