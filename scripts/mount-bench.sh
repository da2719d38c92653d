#!/bin/bash
# The mount against libfuse and tmpfs, in one run: `dcache mount --backend
# passthrough:T` over each transport (FUSE over io_uring and /dev/fuse),
# Debian's libfuse 3.14 `passthrough_ll` on the same tmpfs T, and T itself,
# with the same timeouts and `default_permissions` on both daemons.
#
# Workloads (scripts/mountload.c), each at 1 and 2 client threads:
#   stat-one, stat-deep   stat of "one" and of "a/b/c/file" on a mount with
#                         every timeout 0 (each stat reaches the daemon)
#   openclose             open + close of a/b/c/file (timeouts 1 s)
#   create                create + unlink of a new file (timeouts 1 s)
#   seqwrite, seqread     1 GiB per thread in 1 MiB calls (write + fsync;
#                         read after dropping the file's cached pages)
#   randread              4 KiB preads at random offsets of those files
#
# Servers, alternated within every round (ROUNDS rounds):
#   tmpfs       T itself
#   uring       dcache mount -o uring      (enable_uring set to Y for the
#                                           run, put back after)
#   devfuse     dcache mount -o no_uring
#   libfuse     passthrough_ll -o source=T,default_permissions
# each daemon with -o timeout=0 for the stats and -o timeout=1 for the rest
# (ours with its defaults otherwise: passthrough I/O as root, zero-trip
# opens).
#
# Prints every round, then per workload and thread count the median of each
# server with max/min over the rounds, and the ratios of the medians:
# uring/libfuse, devfuse/libfuse, best-of-ours/tmpfs.
#
#   scripts/mount-bench.sh [DCACHE_BINARY] [ROUNDS] [SECONDS]
#   e.g. scripts/mount-bench.sh target/release/dcache 5 2
#
# Needs root (a tmpfs of its own, the io_uring parameter), cc, pkg-config
# fuse3 and /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c (Debian's
# libfuse3-dev), fusermount3; or LOAD_BIN and PLL_BIN, the client and
# passthrough_ll built elsewhere. Wall-clock figures: a quiet machine. About
# 2 minutes per round with SECONDS=2.
set -euo pipefail

BIN=${1:-target/release/dcache}
# OURS_OPTS: more -o options for our daemons (e.g. poll_us=1000 for the
# io_uring keepers).
OURS=${OURS_OPTS:+,$OURS_OPTS}
ROUNDS=${2:-5}
SECS=${3:-2}
THREADS=${THREADS:-1 2}
PLL_SRC=${PLL_SRC:-/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c}
PARAM=/sys/module/fuse/parameters/enable_uring
HERE=$(cd "$(dirname "$0")" && pwd)
ME=mount-bench

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "$ME: no executable $BIN" >&2; exit 2; }
[ -n "${PLL_BIN:-}" ] || [ -r "$PLL_SRC" ] || { echo "$ME: no $PLL_SRC (install libfuse3-dev)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$ME: needs root (its own tmpfs, the io_uring parameter)" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/mount-bench.XXXXXX")
DPID=
CONN=
WAS=
# shellcheck source=scripts/daemon-lib.sh
. "$HERE/daemon-lib.sh"

unmount_all() {
  local m
  awk -v w="$W" 'index($2, w "/") == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do
      fusermount3 -u -q "$m" 2> /dev/null || umount "$m" 2> /dev/null || umount -l "$m" 2> /dev/null || true
    done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$DPID" ] && kill -0 "$DPID" 2> /dev/null; then kill_daemon; fi
  unmount_all
  [ -z "$WAS" ] || echo "$WAS" > "$PARAM"
  rm -rf "$W"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mkdir -p "$W/bin" "$W/tree"
# LOAD_BIN and PLL_BIN name clients and servers built elsewhere (for a
# machine without a compiler or libfuse3-dev).
if [ -n "${LOAD_BIN:-}" ]; then LOAD=$LOAD_BIN; else
  cc -O2 -pthread -o "$W/bin/mountload" "$HERE/mountload.c"
  LOAD=$W/bin/mountload
fi
if [ -n "${PLL_BIN:-}" ]; then PLL=$PLL_BIN; else
  # shellcheck disable=SC2046 # pkg-config prints several words on purpose
  cc -O2 $(pkg-config fuse3 --cflags) -o "$W/bin/passthrough_ll" "$PLL_SRC" $(pkg-config fuse3 --libs)
  PLL=$W/bin/passthrough_ll
fi

T=$W/tree
mount -t tmpfs -o size=6g tmpfs "$T"
mkdir -p "$T/a/b/c"
: > "$T/a/b/c/file"
: > "$T/one"

SERVERS="tmpfs devfuse libfuse"
if [ -w "$PARAM" ]; then
  WAS=$(cat "$PARAM")
  echo Y > "$PARAM"
  SERVERS="tmpfs uring devfuse libfuse"
else
  echo "$ME: no $PARAM: FUSE over io_uring left out"
fi

# start SERVER TIMEOUT MNT: the daemon in the background (DPID), mounted.
# Each daemon runs in a session of its own (setsid), as both do when they
# go to the background by themselves: a daemon in the client's session
# shares its scheduler autogroup, which changed the round trip's speed by
# up to 2x for both servers (docs/BENCHMARKS.md, "Keeping the queues' CPUs
# awake"). This script has no job control, so setsid runs in the
# background child itself and $! is the daemon.
start() {
  local s=$1 to=$2 m=$3 log=$W/daemon.log i
  mkdir -p "$m"
  case $s in
    uring) setsid "$BIN" mount -f --backend "passthrough:$T" -o "uring,timeout=$to$OURS" "$m" 2> "$log" & DPID=$! ;;
    devfuse) setsid "$BIN" mount -f --backend "passthrough:$T" -o "no_uring,timeout=$to$OURS" "$m" 2> "$log" & DPID=$! ;;
    libfuse) setsid "$PLL" -f -o "source=$T,timeout=$to,default_permissions" "$m" 2> "$log" & DPID=$! ;;
  esac
  wait_mounted "$m" "$log"
  stat "$m/a/b/c/file" > /dev/null
}

stop() { stop_daemon "$1" 5; }

RES=$W/results # lines: WORKLOAD THREADS ROUND SERVER RATE UNIT
: > "$RES"

# ticks PID: user and system clock ticks the process has used so far.
ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# load SERVER ROUND DIR WORKLOAD..: run each workload at each thread count.
# Each line also gives the CPU time per operation (per MB for the MB/s
# rows): the client's (user + system, from the shell's `time`) and, for a
# daemon, the daemon's (user + system, from its /proc/PID/stat before and
# after; clock ticks, so a coarse figure for short runs).
load() {
  local s=$1 r=$2 d=$3 w t out
  shift 3
  for w in "$@"; do
    for t in $THREADS; do
      local du0=0 ds0=0 du1=0 ds1=0 cu cs
      # On a guest that gives freed memory back to its host (free page
      # reporting), a write into fresh tmpfs pages costs what the host
      # charges to fault them in again, up to 2 ms per MB here, and which
      # server met that depended on the order (tmpfs itself swung 6x).
      # So every sequential write starts right after the same amount was
      # written and freed on T: its pages are then ones the guest still
      # holds (reporting waits about 2 s).
      if [ "$w" = seqwrite ]; then
        dd if=/dev/zero of="$T/warm" bs=1M count=$((t * 1024 + 256)) status=none
        rm -f "$T/warm"
      fi
      [ "$s" = tmpfs ] || read -r du0 ds0 < <(ticks "$DPID")
      TIMEFORMAT='%U %S'
      { time out=$(timeout $((${SECS%.*} + 120)) "$LOAD" "$w" "$d" "$t" "$SECS"); } 2> "$W/time" || {
        echo "$ME: $w failed on $s: $out" >&2
        cat "$W/time" >&2
        [ "$s" = tmpfs ] || cat "$W/daemon.log" >&2
        exit 1
      }
      [ "$s" = tmpfs ] || read -r du1 ds1 < <(ticks "$DPID")
      read -r cu cs < <(tail -n 1 "$W/time")
      local rate=${out#*rate=} unit=${out##*unit=}
      rate=${rate%% *}
      echo "$w $t $r $s $rate $unit" >> "$RES"
      printf '  %-9s %-8s %dt %12s %-6s %s\n' "$s" "$w" "$t" "$rate" "$unit" "$(awk -v r="$rate" -v secs="$SECS" \
        -v cu="$cu" -v cs="$cs" -v du=$((du1 - du0)) -v ds=$((ds1 - ds0)) -v hz="$HZ" -v s="$s" -v unit="$unit" 'BEGIN {
          n = r * secs; if (n <= 0) exit
          per = (unit == "MB/s") ? "MB" : "op"
          printf "cpu per %s: client %.1f+%.1f us", per, cu / n * 1e6, cs / n * 1e6
          if (s != "tmpfs") printf ", daemon %.1f+%.1f us", du / hz / n * 1e6, ds / hz / n * 1e6 }')"
    done
  done
}

echo "dcache: $BIN${OURS:+ (-o ...$OURS)}"
echo "host: $(nproc) CPUs, $(uname -r); rounds=$ROUNDS seconds=$SECS threads=\"$THREADS\""
echo "servers: $SERVERS (over tmpfs $T)"
# A guest's halt polling (the haltpoll cpuidle driver) decides how long an
# idle vCPU spins before it halts, and so what a wake-up costs each round
# trip (docs/BENCHMARKS.md, "Guest halt polling").
HP=/sys/module/haltpoll/parameters/guest_halt_poll_ns
echo "guest halt polling: $(cat "$HP" 2>/dev/null || echo "no haltpoll driver") (ns, $HP)"
# STATS and REST may be narrowed from the environment (e.g. REST="openclose
# create" for the small-request rows only).
STATS=${STATS-"stat-one stat-deep"}
REST=${REST-"openclose create seqwrite seqread randread"}
for r in $(seq "$ROUNDS"); do
  echo "round $r"
  for s in $SERVERS; do
    if [ "$s" = tmpfs ]; then
      load "$s" "$r" "$T" $STATS $REST
    else
      m=$W/mnt
      start "$s" 0 "$m"
      load "$s" "$r" "$m" $STATS
      stop "$m"
      start "$s" 1 "$m"
      load "$s" "$r" "$m" $REST
      stop "$m"
    fi
    rm -rf "$T"/big* "$T"/t[0-9]*
  done
done

echo
echo "medians over $ROUNDS rounds (max/min of the rounds in brackets); ratios of the medians"
printf '%-10s %-3s' workload thr
for s in $SERVERS; do printf ' %18s' "$s"; done
printf '  %s\n' "ratios"
for w in $STATS $REST; do
  for t in $THREADS; do
    printf '%-10s %-3s' "$w" "${t}t"
    declare -A med=()
    for s in $SERVERS; do
      read -r m spread < <(awk -v w="$w" -v t="$t" -v s="$s" '$1 == w && $2 == t && $4 == s { print $5 }' "$RES" |
        sort -n | awk '{ a[NR] = $1 } END {
          m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
          printf "%.0f %.2f\n", m, (a[1] > 0 ? a[NR] / a[1] : 0) }')
      med[$s]=$m
      printf ' %11s (%4s)' "$m" "$spread"
    done
    ratio() { awk -v a="${med[$1]:-0}" -v b="${med[$2]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }'; }
    best=devfuse
    if [ -n "${med[uring]:-}" ] && [ "${med[uring]%.*}" -gt "${med[devfuse]%.*}" ]; then best=uring; fi
    line=""
    [ -z "${med[uring]:-}" ] || line="uring/libfuse $(ratio uring libfuse), "
    line="${line}devfuse/libfuse $(ratio devfuse libfuse), ours/tmpfs $(ratio "$best" tmpfs)"
    printf '  %s\n' "$line"
    unset med
  done
done
