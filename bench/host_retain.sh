#!/bin/bash
# pmd's database: bytes a sample and a process-day, and the longest step of
# its retention (pmd --retain) on a big database: bench/host_retain.py.
#   bench/host_retain.sh [PROCESSES [SAMPLES_EACH]]   # default 200 x 20000
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
PYTHONPATH="$top/src${PYTHONPATH:+:$PYTHONPATH}" exec "$top/.venv/bin/python" \
	"$top/bench/host_retain.py" "$@"
