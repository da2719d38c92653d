#!/bin/bash
# Uncached stat through FUSE: `dcache mount --backend mem` against libfuse's
# passthrough_ll (cache=never, over a tmpfs tree), as in README "Against
# libfuse". Each run starts a fresh daemon on its own mount point, creates
# a/b/c/file (through the mount for ours: it serves an empty memfs), runs
# scripts/mountload.c (stat-deep) (THREADS threads, each fstatat(dirfd, "a/b/c/file") in a
# loop) for SECONDS, and stops the daemon. Rounds alternate the servers:
#
#   libfuse        passthrough_ll -f -o source=TREE,cache=never MNT
#   ours           dcache mount -f --backend mem
#                    -o attr_timeout=0,entry_timeout=0,no_default_permissions MNT
#   ours-poll0     the same with poll_us=0 (no busy polling)
#   ours-poll1000  the same with poll_us=1000; only on hosts with fewer than
#                  4 CPUs, where polling is off by default (on 4 or more CPUs
#                  "ours" already polls with poll_us=1000)
#
# Prints every round, then per thread count the median stats/s of each
# server and the median (min to max) of the per-round ratios ours/libfuse.
# Wall-clock figures: run it on a quiet machine.
#
#   scripts/fuse-vs-libfuse.sh [DCACHE_BINARY] [ROUNDS] [SECONDS]
#   e.g. scripts/fuse-vs-libfuse.sh target/release/dcache 6 2
#   THREADS="1 2 4" scripts/fuse-vs-libfuse.sh ...   (default THREADS="1 2")
#
# Needs cc, pkg-config fuse3 and /usr/share/doc/libfuse3-dev/examples/
# passthrough_ll.c (Debian/Ubuntu libfuse3-dev), fusermount3. Run as root
# (the libfuse tree is then on its own tmpfs) or as a user allowed to mount
# FUSE. Everything it mounts is unmounted, and every daemon it started
# killed, on exit.
set -euo pipefail

BIN=${1:-target/release/dcache}
ROUNDS=${2:-6}
SECS=${3:-2}
THREADS=${THREADS:-1 2}
PLL_SRC=${PLL_SRC:-/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c}
HERE=$(cd "$(dirname "$0")" && pwd)

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "no executable $BIN" >&2; exit 2; }
[ -r "$PLL_SRC" ] || { echo "no $PLL_SRC (install libfuse3-dev)" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/fuse-vs-libfuse.XXXXXX")
DPID=
TMPFS=

# Unmount whatever is still mounted under $W (deepest first), lazily if
# it must.
unmount_all() {
  local m
  awk -v w="$W" '$2 == w || index($2, w "/") == 1 { print $2 }' /proc/self/mounts |
    sort -r | while read -r m; do
      fusermount3 -u -q "$m" 2> /dev/null || umount "$m" 2> /dev/null ||
        fusermount3 -u -z -q "$m" 2> /dev/null || umount -l "$m" 2> /dev/null || true
    done
}

CONN=

ME=fuse-vs-libfuse
# shellcheck source=scripts/daemon-lib.sh
. "$HERE/daemon-lib.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$DPID" ] && kill -0 "$DPID" 2> /dev/null; then kill_daemon; fi
  unmount_all
  if awk -v w="$W" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    echo "fuse-vs-libfuse: something is still mounted under $W; left in place" >&2
  else
    rm -rf "$W"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "building mountload and passthrough_ll (cc -O2) in $W/bin"
mkdir -p "$W/bin"
cc -O2 -pthread -o "$W/bin/mountload" "$HERE/mountload.c"
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
cc -O2 $(pkg-config fuse3 --cflags) -o "$W/bin/passthrough_ll" "$PLL_SRC" \
  $(pkg-config fuse3 --libs)
STATLOOP=$W/bin/mountload
PLL=$W/bin/passthrough_ll

# libfuse's source tree: on its own tmpfs when we may mount one.
SRC=$W/tree
mkdir -p "$SRC"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1m tmpfs "$SRC" 2> /dev/null; then
  TMPFS=$SRC
fi
mkdir -p "$SRC/a/b/c"
: > "$SRC/a/b/c/file"

VARIANTS="libfuse ours ours-poll0"
if [ "$(nproc)" -lt 4 ]; then VARIANTS="$VARIANTS ours-poll1000"; fi
OURS_OPTS=attr_timeout=0,entry_timeout=0,no_default_permissions

# start VARIANT MNT LOG: start the daemon in the background (pid in DPID),
# wait until it is mounted, and make sure a/b/c/file exists behind it.
start() {
  local v=$1 m=$2 log=$3 i
  mkdir -p "$m"
  case $v in
    libfuse) "$PLL" -f -o "source=$SRC,cache=never" "$m" 2> "$log" & DPID=$! ;;
    ours) "$BIN" mount -f --backend mem -o "$OURS_OPTS" "$m" 2> "$log" & DPID=$! ;;
    ours-poll*) "$BIN" mount -f --backend mem -o "$OURS_OPTS,poll_us=${v#ours-poll}" "$m" \
      2> "$log" & DPID=$! ;;
  esac
  wait_mounted "$m" "$log"
  # Ours serves an empty memfs: create the tree through the mount.
  case $v in ours*) mkdir -p "$m/a/b/c" && : > "$m/a/b/c/file" ;; esac
  stat "$m/a/b/c/file" > /dev/null
}

stop() { stop_daemon "$1" 5; }

RES=$W/results # lines: THREADS ROUND VARIANT STATS_PER_S
: > "$RES"
echo "dcache: $BIN"
echo "host: $(nproc) CPUs, $(uname -r); rounds=$ROUNDS seconds=$SECS threads=\"$THREADS\""
echo "servers: $VARIANTS"
run=0
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    line="round $r threads $t:"
    for v in $VARIANTS; do
      run=$((run + 1))
      m=$W/mnt.$run
      start "$v" "$m" "$W/daemon.$run.log"
      out=$(timeout $((SECS + 30)) "$STATLOOP" stat-deep "$m" "$t" "$SECS") || {
        echo "fuse-vs-libfuse: client failed against $v: $out" >&2
        cat "$W/daemon.$run.log" >&2
        exit 1
      }
      stop "$m"
      rate=${out##*rate=}
      rate=${rate%% *}
      echo "$t $r $v $rate" >> "$RES"
      line="$line $v $rate"
    done
    echo "$line"
  done
done

# Medians (lower median for even counts is avoided: mean of the middle two).
echo
echo "medians, stats/s (ratio = ours/libfuse per round: median, min to max):"
for t in $THREADS; do
  line="threads $t:"
  for v in $VARIANTS; do
    med=$(awk -v t="$t" -v v="$v" '$1 == t && $3 == v { print $4 }' "$RES" | sort -n |
      awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.0f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
    if [ "$v" = libfuse ]; then
      line="$line libfuse $med"
    else
      ratios=$(awk -v t="$t" -v v="$v" '
        $1 == t && $3 == "libfuse" { lib[$2] = $4 }
        $1 == t && $3 == v { ours[$2] = $4 }
        END { for (r in ours) if (lib[r] > 0) printf "%.3f\n", ours[r] / lib[r] }' "$RES" | sort -n)
      rs=$(echo "$ratios" | awk '{ a[NR] = $1 } END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "%.2fx (%.2f to %.2f)", m, a[1], a[NR] }')
      line="$line | $v $med $rs"
    fi
  done
  echo "$line"
done
