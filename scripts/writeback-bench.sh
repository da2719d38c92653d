#!/bin/bash
# Small writes with and without the kernel's writeback cache, one run,
# rounds alternating: `dd bs=4k` of 256 MiB (then fsync) into a fresh file
# on `dcache mount --backend mem` and on `--backend passthrough:DIR` (DIR
# on /dev/shm, passthrough I/O off so both go through the daemon), each
# with `-o writeback_cache` and without. Prints every round and the median
# MB/s per case. Wall-clock figures: a quiet machine.
#
#   scripts/writeback-bench.sh [DCACHE_BINARY] [ROUNDS]
#
# Needs root or fusermount3, dd. Unmounts what it mounted on exit.
set -euo pipefail
BIN=${1:-target/release/dcache}
ROUNDS=${2:-3}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "no executable $BIN" >&2; exit 2; }
W=$(mktemp -d /dev/shm/writeback-bench.XXXXXX)
trap 'fusermount3 -u -q "$W/mnt" 2>/dev/null || umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/mnt" "$W/src"
declare -A all
for r in $(seq "$ROUNDS"); do
  for backend in mem "passthrough:$W/src"; do
    for wb in no_writeback_cache writeback_cache; do
      "$BIN" mount --backend "$backend" -o "$wb,no_passthrough_io" "$W/mnt"
      rate=$(dd if=/dev/zero of="$W/mnt/f" bs=4k count=65536 conv=fsync 2>&1 |
        awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print int(268435456 / $(i - 1) / 1e6) }')
      rm -f "$W/mnt/f"
      fusermount3 -u "$W/mnt" 2>/dev/null || umount "$W/mnt"
      name="${backend%%:*} $wb"
      echo "round $r: $name: $rate MB/s"
      all[$name]="${all[$name]:-} $rate"
    done
  done
done
for k in "${!all[@]}"; do
  med=$(tr ' ' '\n' <<<"${all[$k]}" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "median $k: $med MB/s (rounds:${all[$k]})"
done | sort
