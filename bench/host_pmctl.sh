#!/bin/bash
# pmctl's symbolizer: binutils addr2line (one batched process per object) vs
# pyelftools (DWARF .debug_aranges -> CU -> line program) on a real object
# with debug info (this Python's libpython, ~23 MB, built with -g), for 100
# addresses spread over its functions. pmctl uses addr2line by default
# (PMM_SYMBOLIZER=pyelftools selects the other).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python bench/symbolize_bench.py "$@"
