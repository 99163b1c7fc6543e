# The real programs of the hook benchmarks (bench/guest_hook.sh in the VM,
# bench/host_hook.sh and bench/host_instr.sh on the host), sourced:
# host_bench_start NAME FILE... checks that the built FILEs exist, makes $tmp
# (removed at exit) and writes the workloads there; write_workloads DIR writes
#  DIR/bench.sql  for sqlite3: 10000 inserts, an index, queries;
#  DIR/bench.py   for python3: what a log or API service does (JSON out and
#                 back in, regular expressions, a Counter, a sort);
#  DIR/bench.pl   for perl: hash churn with string appends (each value grows
#                 by .=, which perl does with realloc; older keys deleted).
# All are malloc-bound: bare on the host cpu, sqlite3 calls malloc, free or
# realloc about 10 million times a second and this script (objects over 512
# bytes bypass pymalloc) about 5 million; the perl script about 6 million,
# 70% of them realloc (534,000 a run: 29% in place, the rest moved).

host_bench_start() {
	local name=$1 f
	shift
	for f in "$@"; do
		[ -f "$f" ] || { echo "$name: $f missing: run make" >&2; exit 1; }
	done
	tmp=$(mktemp -d "/tmp/$name.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	write_workloads "$tmp"
}

write_workloads() {
	local dir=$1 i
	{
		echo "create table t(id integer primary key, name text, v real, blob text);"
		echo "begin;"
		for ((i = 0; i < 10000; i++)); do
			echo "insert into t(name, v, blob) values ('name-$i', $i.5, hex(randomblob($((i % 200 + 10)))));"
		done
		echo "commit;"
		echo "create index t_name on t(name);"
		echo "select count(*), sum(v) from t where name like 'name-1%';"
		echo "select name, length(blob) from t order by blob limit 3;"
	} >"$dir/bench.sql"
	cat >"$dir/bench.py" <<'PY'
import collections
import json
import re

docs = []
for i in range(10000):
    doc = {"id": i, "name": f"user-{i}", "tags": [f"t{j}" for j in range(i % 7)],
           "score": i * 1.5, "text": "lorem ipsum " * (i % 40)}
    docs.append(json.dumps(doc))
words: collections.Counter[str] = collections.Counter()
word = re.compile(r"[a-z]+")
total = 0
for s in docs:
    doc = json.loads(s)
    words.update(word.findall(doc["text"]))
    total += len(doc["tags"]) + int(doc["score"])
docs.sort(key=len)
print(total, words.most_common(2), len(docs[-1]))
PY
	cat >"$dir/bench.pl" <<'PL'
use strict;
use warnings;

# hash churn with string appends: each value grows by .= (perl's
# realloc), and the keys 2000 behind are deleted
my (%h, $total);
for my $i (0 .. 39999) {
    my $k = "key-$i";
    $h{$k} .= "field-$_=" . ($i * $_) . ";" for 0 .. $i % 64;
    $total += length $h{$k};
    delete $h{"key-" . ($i - 2000)} if $i >= 2000;
}
print "$total ", scalar(keys %h), "\n";
PL
}
