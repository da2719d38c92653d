#!/bin/bash
# /dev/fuse against FUSE over io_uring, one run, rounds alternating the
# transports: `dcache mount --backend mem` with `-o no_uring` and with
# `-o uring` (the kernel parameter enable_uring is set to Y for the run
# and put back as it was). Each round and transport starts two fresh
# daemons:
#
#   stat   -o attr_timeout=0,entry_timeout=0,no_default_permissions:
#          scripts/mountload.c (stat-deep), 1 thread, fstatat("a/b/c/file") for SECONDS
#          (every stat reaches the daemon: 4 LOOKUPs and a GETATTR)
#   io     default options:
#          create  a Python loop creating (open O_CREAT + close) 10,000
#                  empty files in one directory
#          write   dd if=/dev/zero of=big bs=1M count=1024 (then fsync)
#          read    the page cache dropped for that file alone (dd
#                  iflag=nocache count=0, fadvise DONTNEED), then
#                  dd if=big of=/dev/null bs=1M
#
# Prints every round, then the median of each figure per transport and
# the median ratio uring / dev-fuse. Wall-clock figures: a quiet machine.
#
#   scripts/fuse-uring-bench.sh [DCACHE_BINARY] [ROUNDS] [SECONDS]
#   e.g. scripts/fuse-uring-bench.sh target/release/dcache 5 2
#
# Needs root (the kernel parameter), Linux 6.14+ with CONFIG_FUSE_IO_URING,
# cc, python3, fusermount3. Everything it mounts is unmounted, and every
# daemon it started stopped, on exit.
set -euo pipefail

BIN=${1:-target/release/dcache}
ROUNDS=${2:-5}
SECS=${3:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
PARAM=/sys/module/fuse/parameters/enable_uring

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "no executable $BIN" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ] || [ ! -w "$PARAM" ]; then
  echo "fuse-uring-bench: needs root and $PARAM (Linux 6.14+, CONFIG_FUSE_IO_URING)" >&2
  exit 2
fi

W=$(mktemp -d "${TMPDIR:-/tmp}/fuse-uring-bench.XXXXXX")
DPID=
CONN=
WAS=$(cat "$PARAM")
ME=fuse-uring-bench
# shellcheck source=scripts/daemon-lib.sh
. "$HERE/daemon-lib.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$DPID" ] && kill -0 "$DPID" 2> /dev/null; then kill_daemon; fi
  awk -v w="$W" 'index($2, w "/") == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do fusermount3 -u -q "$m" 2> /dev/null || umount -l "$m" || true; done
  echo "$WAS" > "$PARAM"
  rm -rf "$W"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
echo Y > "$PARAM"

cc -O2 -pthread -o "$W/mountload" "$HERE/mountload.c"

# start OPTS MNT LOG: a daemon in the background (DPID), mounted.
start() {
  local o=$1 m=$2 log=$3 i
  mkdir -p "$m"
  "$BIN" mount -f --backend mem -o "$o" "$m" 2> "$log" &
  DPID=$!
  wait_mounted "$m" "$log"
  # The transport the daemon logs once mounted.
  for i in $(seq 100); do grep -q "FUSE over" "$log" && break; sleep 0.02; done
}

stop() { stop_daemon "$1" 20; }

now() { date +%s.%N; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.0f\n", n / (b - a) }'; }

RES=$W/results # lines: ROUND TRANSPORT FIGURE VALUE
: > "$RES"
echo "dcache: $BIN"
echo "host: $(nproc) CPUs, $(uname -r); rounds=$ROUNDS seconds=$SECS"
run=0
for r in $(seq "$ROUNDS"); do
  # Alternate which transport goes first.
  if [ $((r % 2)) = 1 ]; then order="dev-fuse uring"; else order="uring dev-fuse"; fi
  for t in $order; do
    case $t in dev-fuse) x=no_uring ;; uring) x=uring ;; esac
    run=$((run + 1))
    m=$W/mnt.$run
    start "attr_timeout=0,entry_timeout=0,no_default_permissions,$x" "$m" "$W/stat.$run.log"
    grep -q "FUSE over $([ $t = uring ] && echo io_uring || echo /dev/fuse)" "$W/stat.$run.log" ||
      { echo "$ME: $t not in use:" >&2; cat "$W/stat.$run.log" >&2; exit 1; }
    mkdir -p "$m/a/b/c" && : > "$m/a/b/c/file"
    out=$(timeout $((SECS + 30)) "$W/mountload" stat-deep "$m" 1 "$SECS")
    stats=${out##*rate=}
    stats=${stats%% *}
    stop "$m"

    start "$x" "$m" "$W/io.$run.log"
    mkdir "$m/d"
    creates=$(python3 -c '
import os, sys, time
d = sys.argv[1]
t = time.perf_counter()
for i in range(10000):
    os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
print(round(10000 / (time.perf_counter() - t)))' "$m/d")
    a=$(now)
    dd if=/dev/zero of="$m/big" bs=1M count=1024 conv=fsync status=none
    b=$(now)
    dd if="$m/big" iflag=nocache count=0 status=none
    c=$(now)
    dd if="$m/big" of=/dev/null bs=1M status=none
    e=$(now)
    wr=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f\n", 1.073741824 / (b - a) }')
    rd=$(awk -v a="$c" -v b="$e" 'BEGIN { printf "%.2f\n", 1.073741824 / (b - a) }')
    stop "$m"
    {
      echo "$r $t stat/s $stats"
      echo "$r $t create/s $creates"
      echo "$r $t write-GB/s $wr"
      echo "$r $t read-GB/s $rd"
    } >> "$RES"
    echo "round $r $t: stat/s $stats create/s $creates write GB/s $wr read GB/s $rd"
  done
done

echo
echo "medians (ratio uring/dev-fuse: median of the per-round ratios, min to max):"
for f in stat/s create/s write-GB/s read-GB/s; do
  med() {
    awk -v t="$1" -v f="$f" '$2 == t && $3 == f { print $4 }' "$RES" | sort -g |
      awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m }'
  }
  ratios=$(awk -v f="$f" '$3 == f && $2 == "dev-fuse" { d[$1] = $4 } $3 == f && $2 == "uring" { u[$1] = $4 }
    END { for (r in u) if (d[r] > 0) printf "%.3f\n", u[r] / d[r] }' "$RES" | sort -g |
    awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
      printf "%.2fx (%.2f to %.2f)", m, a[1], a[NR] }')
  printf '%-11s dev-fuse %-9s uring %-9s %s\n' "$f" "$(med dev-fuse)" "$(med uring)" "$ratios"
done
