#!/bin/bash
# Instructions per cached 4-component `stat` (the README's figure, and the
# sound-core issue's command): `dcache bench stat-same --target lib
# --variant reffree` under callgrind, and the inclusive cost of the library's
# stat (`Vfs::stat_as`) divided by its calls (the first, cold call that
# fills the cache, ~16k instructions, adds ~0.03 per stat over a 1 s run).
#
#   scripts/callgrind-stat.sh [DCACHE_BINARY] [OUTDIR]
#   e.g. scripts/callgrind-stat.sh target/release/dcache
#
# DCACHE_BINARY needs symbols (the release profile has debug = 1). Prints
# calls, inclusive Ir and Ir per stat; keeps callgrind.out in OUTDIR
# (default: a new /tmp/callgrind-stat.XXXXXX).
set -euo pipefail
BIN=${1:-target/release/dcache}
OUTDIR=${2:-$(mktemp -d "${TMPDIR:-/tmp}/callgrind-stat.XXXXXX")}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
for t in valgrind callgrind_annotate; do
  command -v "$t" > /dev/null || { echo "callgrind-stat: needs $t" >&2; exit 2; }
done
OUT=$OUTDIR/callgrind.out
valgrind --tool=callgrind --callgrind-out-file="$OUT" "$BIN" bench stat-same \
  --target lib --variant reffree --threads 1 --seconds 1 --warmup 0 > "$OUTDIR/bench.log" 2>&1
FN='dcache::vfs::lookup::<impl dcache::vfs::Vfs>::stat_as'
calls=$(awk -v pat="$FN\$" -f "$HERE/callgrind-count.awk" "$OUT" | sed -n 's/^calls: //p')
ir=$(callgrind_annotate --inclusive=yes "$OUT" 2> /dev/null |
  awk -v fn="$FN [" '!done && index($0, fn) { gsub(",", "", $1); print $1; done = 1 }')
[ -n "$calls" ] && [ "$calls" -gt 1 ] && [ -n "$ir" ] || { echo "callgrind-stat: no calls of $FN in $OUT" >&2; exit 1; }
echo "stat calls: $calls"
echo "inclusive Ir: $ir"
awk -v ir="$ir" -v c="$calls" 'BEGIN { printf "Ir per cached stat: %.1f\n", ir / c }'
