#!/bin/bash
# Inside the VM (scripts/bench-guest.sh): the module's block table at 1M and
# 10M live blocks: kernel bytes a block, records a second, the slowest batch
# (bench/block_table.py). PMM_BLOCKS: the sizes (default "1000000 10000000").
set -euo pipefail
cd "$PMM_TOP"
# shellcheck disable=SC2086
.venv/bin/python bench/block_table.py ${PMM_BLOCKS:-1000000 10000000}
