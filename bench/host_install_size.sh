#!/bin/bash
# The Python tools' install size: a new venv with `pip install .` (no extras),
# its own pip included; prints MB and checks the tools run from it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/pmm-size.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/v"
"$tmp/v/bin/pip" install -q "$top" 2>&1 | grep -v '^WARNING' || true
"$tmp/v/bin/pmctl" --version >/dev/null
echo "a new venv with pip install . (no extras): $(du -sm "$tmp/v" | cut -f1) MB"
