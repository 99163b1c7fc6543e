#!/bin/bash
# Inside the VM (scripts/bench-guest.sh): a process sending N malloc records
# at addresses an unseeded hash would put in one slot (multiples of the
# golden ratio's inverse), against N random addresses: the module's time for
# each and their ratio. The tables hash with a per-process key, so the two
# should cost the same. Each run is a new process (a fresh table).
#   PMM_FLOOD_N (default 1000000), PMM_FLOOD_ROUNDS (default 3)
set -euo pipefail
cd "$PMM_TOP"
n=${PMM_FLOOD_N:-1000000}
rounds=${PMM_FLOOD_ROUNDS:-3}
flood=tests/progs/bin/flood
for mode in random adversarial; do
	for ((i = 0; i < rounds; i++)); do
		"$flood" "$mode" "$n"
	done
done | awk '
	{ split($1, m, "="); split($3, s, "="); t[m[2]] = t[m[2]] " " s[2]; sum[m[2]] += s[2]; k[m[2]]++ }
	END {
		printf "flood of %s records (module time, s): random%s, adversarial%s\n", N, t["random"], t["adversarial"]
		printf "mean: random %.3f s, adversarial %.3f s, ratio %.2fx\n",
			sum["random"] / k["random"], sum["adversarial"] / k["adversarial"],
			(sum["adversarial"] / k["adversarial"]) / (sum["random"] / k["random"])
	}' N="$n"
