#!/bin/bash
# Instructions and cache misses per path of `dcache bench stat-random`,
# one `stat` after another (variant reffree) against the batched walk
# (variant batch, `AsCred::stat_many`), under callgrind's cache simulation
# with the last level set to the real L3, rounded down to a power of two
# (valgrind misreads this VM's; see
# docs/memory.md). Only the measured loop counts: --toggle-collect on the
# lib case's worker (the tree's building and warming, and the teardown, are
# not counted), and the counters are zeroed (callgrind_control -z) when the
# bench prints its first measured second, so the warm-up's misses are not
# counted either: after the cache was warmed by stat'ing every path in
# order, the first random touches miss more than the steady state does, and
# the batch gets through fewer paths per second under valgrind, so without
# the zeroing its figure is inflated more (measured at 100k, 10 s, no
# warm-up: 0.53 LL misses per path single, 0.74 batch). The loop's own work
# (drawing random indices, prefetching the path table) is in both. Paths
# are counted exactly: calls of `Vfs::stat_as` (reffree), and calls of
# `Vfs::stat_many_as` times the bench's BATCH (batch).
#
# Valgrind does not model prefetches (nor the TLB, nor time): the misses
# counted are the same loads in both variants; what the batch changes is
# that its misses are started several at a time, which only the bench's
# ns per path shows.
#
#   scripts/callgrind-batch.sh [DCACHE_BINARY] [PATHS] [OUTDIR]
#   e.g. scripts/callgrind-batch.sh target/release/dcache 100000
#
# WARMUP (seconds under valgrind, default 10) and SECONDS_RUN (default 5)
# set the bench's --warmup and --seconds. LL: LL_SIZE (bytes, default: the
# L3 size lscpu reports), 16-way, 64-byte lines. Prints per variant: paths,
# Ir, D1mr, DLmr (last-level read misses) per path; keeps the
# callgrind.out files and bench logs in OUTDIR (default: a new
# /tmp/callgrind-batch.XXXXXX).
set -euo pipefail
BIN=${1:-target/release/dcache}
PATHS=${2:-100000}
OUTDIR=${3:-$(mktemp -d "${TMPDIR:-/tmp}/callgrind-batch.XXXXXX")}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
for t in valgrind callgrind_control; do
  command -v "$t" > /dev/null || { echo "callgrind-batch: needs $t" >&2; exit 2; }
done
if [ -z "${LL_SIZE:-}" ]; then
  # "L3 cache: 33554432 (1 instance)" -> 33554432.
  LL_SIZE=$(lscpu -B 2> /dev/null | awk -F: '/^L3 cache/ { split($2, w, " "); print w[1]; exit }')
fi
[ -n "$LL_SIZE" ] || { echo "callgrind-batch: no L3 size (set LL_SIZE)" >&2; exit 2; }
# Valgrind needs a power-of-two number of sets: an L3 like this VM's
# 260 MiB is simulated as the power of two below it (256 MiB).
p=1
while [ $((p * 2)) -le "$LL_SIZE" ]; do p=$((p * 2)); done
if [ "$p" != "$LL_SIZE" ]; then
  echo "callgrind-batch: LL $LL_SIZE bytes simulated as $p (a power of two)"
  LL_SIZE=$p
fi
BATCH=$(sed -n 's/^pub const BATCH: usize = \([0-9]*\);/\1/p' \
  "$HERE/../dcache-bench/src/workloads/stat_random.rs")
[ -n "$BATCH" ] || { echo "callgrind-batch: BATCH not found in stat_random.rs" >&2; exit 2; }
echo "paths $PATHS, LL $LL_SIZE bytes 16-way, batch $BATCH paths per call, out $OUTDIR"
for variant in reffree batch; do
  OUT=$OUTDIR/callgrind.$variant.out
  LOG=$OUTDIR/bench.$variant.log
  rm -f "$OUT" "$OUT".*
  valgrind --tool=callgrind --cache-sim=yes --LL="$LL_SIZE,16,64" --collect-atstart=no \
    --toggle-collect='<dcache_bench::workloads::stat_random::LibCase as dcache_bench::workload::Case>::worker' \
    --callgrind-out-file="$OUT" "$BIN" bench stat-random --target lib --variant "$variant" \
    --threads 1 --seconds "${SECONDS_RUN:-5}" --warmup "${WARMUP:-10}" --paths "$PATHS" > "$LOG" 2>&1 &
  VPID=$!
  # The first measured second's line ("... 1t: min:N max:N total:N").
  until grep -q 'total:' "$LOG"; do
    kill -0 "$VPID" 2> /dev/null || { echo "callgrind-batch: the bench ended early:" >&2; cat "$LOG" >&2; exit 1; }
    sleep 0.5
  done
  callgrind_control -z "$VPID" > "$OUTDIR/zero.$variant.log" 2>&1 || {
    echo "callgrind-batch: callgrind_control -z failed" >&2; cat "$OUTDIR/zero.$variant.log" >&2; exit 1
  }
  wait "$VPID"
  if [ "$variant" = reffree ]; then
    pat='dcache::vfs::lookup::<impl dcache::vfs::Vfs>::stat_as$'; per=1
  else
    pat='dcache::vfs::batch::<impl dcache::vfs::Vfs>::stat_many_as'; per=$BATCH
  fi
  awk -v pat="$pat" -f "$HERE/callgrind-count.awk" "$OUT" | awk -v per="$per" -v v="$variant" '
    /^events:/ { for (i = 2; i <= NF; i++) ev[i - 1] = $i }
    /^totals:/ { for (i = 2; i <= NF; i++) tot[ev[i - 1]] = $i }
    /^calls:/ { paths = $2 * per }
    END {
      if (paths == 0) { print v ": no calls counted" > "/dev/stderr"; exit 1 }
      printf "%-8s paths %d  Ir/path %.1f  D1mr/path %.2f  DLmr/path %.3f\n", v, paths,
        tot["Ir"] / paths, tot["D1mr"] / paths, tot["DLmr"] / paths
    }'
done
