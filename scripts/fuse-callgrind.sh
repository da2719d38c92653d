#!/bin/bash
# Userspace instructions per FUSE request, read to reply, as in README
# "Against libfuse": `dcache mount --backend mem` runs under callgrind with
# one worker (-s), no busy polling (poll_us=0) and every timeout 0, and the
# C client (scripts/mountload.c (stat-deep)) stats a/b/c/file through it: 9 requests per
# stat (4 LOOKUPs, one per component, a GETATTR of each directory before
# its LOOKUP and one of the file: memfs keeps ACLs, so FUSE_POSIX_ACL is
# negotiated, which makes the kernel check permissions itself, refreshing
# each directory's attributes under attr_timeout=0), each one read of
# /dev/fuse and one writev of the reply.
#
# What is counted: every instruction the daemon runs in userspace between
# two points, the counters zeroed (callgrind_control -z) after the tree is
# created and the path warmed, and dumped (callgrind_control -d) right after
# the last stat. In between only the one worker runs (the signal thread
# sleeps in sigwait, the main thread in join, and poll_us=0 starts no
# governor), and it does nothing but read a request, parse it, dispatch it
# and write the reply: so Ir / requests is the work per request, read to
# reply (and back to the next read). The syscalls themselves are kernel
# time, which callgrind does not see. Requests are counted exactly from the
# dump: calls of the request handler (<DcacheFs as wire::serve::Handler>
# ::handle, kept out of line for this count), checked against 5 x stats. No --toggle-collect: with a window
# zeroed while the worker is inside the toggled function, callgrind's
# summary and the sum of its per-function costs disagree (seen: 3%).
#
#   scripts/fuse-callgrind.sh [DCACHE_BINARY] [REQUESTS] [OUTDIR]
#   e.g. scripts/fuse-callgrind.sh target/release/dcache 100000
#
# DCACHE_BINARY needs symbols (cargo build --release: the release profile
# has debug = 1). Prints requests, Ir, Ir/request; writes to OUTDIR
# (default: a new /tmp/fuse-callgrind.XXXXXX, kept): callgrind.out.* (the
# dump), top.txt (functions by inclusive cost within the requests,
# callgrind_annotate --inclusive=yes), self.txt (by self cost),
# requests.txt (per handler: op, calls, inclusive Ir, Ir/call), daemon.log.
set -euo pipefail

BIN=${1:-target/release/dcache}
REQUESTS=${2:-100000}
OUTDIR=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
# One call of one of these per request (their calls are counted per op).
REQ_PREFIX='<dcache_fuse::fs::DcacheFs as dcache_fuse::wire::serve::Handler>::'
# no_uring: the count is of the /dev/fuse path (one worker reading and
# writing), whatever enable_uring says.
OPTS=attr_timeout=0,entry_timeout=0,no_default_permissions,poll_us=0,no_uring

case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "no executable $BIN" >&2; exit 2; }
for t in valgrind callgrind_control callgrind_annotate cc fusermount3; do
  command -v "$t" > /dev/null || { echo "fuse-callgrind: needs $t" >&2; exit 2; }
done
if ! nm -C "$BIN" 2> /dev/null | grep -F "$REQ_PREFIX" > /dev/null; then
  echo "fuse-callgrind: $BIN has no symbols for $REQ_PREFIX* (stripped?)" >&2
  exit 2
fi
STATS=$(((REQUESTS + 4) / 5))
if [ -z "$OUTDIR" ]; then OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/fuse-callgrind.XXXXXX"); fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
rm -f "$OUTDIR"/callgrind.out*
W=$(mktemp -d "${TMPDIR:-/tmp}/fuse-callgrind-run.XXXXXX")
M=$W/mnt
DPID=

CONN=

ME=fuse-callgrind
# shellcheck source=scripts/daemon-lib.sh
. "$HERE/daemon-lib.sh"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$DPID" ] && kill -0 "$DPID" 2> /dev/null; then kill_daemon; fi
  if mountpoint -q "$M" 2> /dev/null; then
    fusermount3 -u -q "$M" 2> /dev/null || umount "$M" 2> /dev/null ||
      fusermount3 -u -z -q "$M" 2> /dev/null || umount -l "$M" 2> /dev/null || true
  fi
  if mountpoint -q "$M" 2> /dev/null; then
    echo "fuse-callgrind: $M still mounted; $W left in place" >&2
  else
    rm -rf "$W"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

cc -O2 -pthread -o "$W/mountload" "$HERE/mountload.c"
mkdir -p "$M"

echo "daemon: valgrind --tool=callgrind $BIN mount -f -s --backend mem -o $OPTS"
valgrind --tool=callgrind --callgrind-out-file="$OUTDIR/callgrind.out" \
  "$BIN" mount -f -s --backend mem -o "$OPTS" "$M" 2> "$OUTDIR/daemon.log" &
DPID=$!
for _ in $(seq 600); do
  mountpoint -q "$M" && break
  kill -0 "$DPID" 2> /dev/null || break
  sleep 0.1
done
if ! mountpoint -q "$M"; then
  echo "fuse-callgrind: daemon did not mount within 60 s:" >&2
  cat "$OUTDIR/daemon.log" >&2
  exit 1
fi
# Its fusectl connection number (the minor of the mount's device).
CONN=$(awk -v m="$M" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)

# Ours serves an empty memfs: create the tree through the mount, warm up.
mkdir -p "$M/a/b/c"
: > "$M/a/b/c/file"
"$W/mountload" stat-deep "$M" 1 60 1000 > /dev/null

timeout 60 callgrind_control -z "$DPID" > "$W/zero.log" 2>&1 || {
  echo "fuse-callgrind: callgrind_control -z failed:" >&2
  cat "$W/zero.log" >&2
  exit 1
}
echo "client: mountload stat-deep, $STATS stats of a/b/c/file (1 thread)"
client=$("$W/mountload" stat-deep "$M" 1 3600 "$STATS")
echo "  $client"
timeout 60 callgrind_control -d "$DPID" > "$W/dump.log" 2>&1 || {
  echo "fuse-callgrind: callgrind_control -d failed:" >&2
  cat "$W/dump.log" >&2
  exit 1
}
# Plain unmount: the worker reads ENODEV and the daemon exits. (Not
# SIGTERM: seen once under valgrind, its handler's prune hung on a request
# to its own mount after the worker had gone.)
fusermount3 -u "$M"
if gone "$DPID" 30; then
  wait "$DPID" || true
  DPID=
else
  echo "fuse-callgrind: daemon still running 30 s after unmount; killing it" >&2
  kill_daemon
fi

DUMP=$(find "$OUTDIR" -name 'callgrind.out.*' | sort -V | head -n 1)
[ -n "$DUMP" ] || { echo "fuse-callgrind: no dump in $OUTDIR" >&2; exit 1; }
stats=$(echo "$client" | sed 's/.* ops=\([0-9]*\) .*/\1/')

# Ir in the dump ("summary:"; "totals:", the sum of all its cost lines,
# must agree) and calls of the request handlers. Function names are
# compressed in the file: "cfn=(ID) NAME" the first time, "cfn=(ID)" after;
# a "calls=N ..." line follows.
ir=$(awk '/^summary:/ { print $2; exit }' "$DUMP")
totals=$(awk '/^totals:/ { print $2; exit }' "$DUMP")
awk -v pre="$REQ_PREFIX" '
  /^c?fn=\(/ {
    id = $1; sub(/^c?fn=/, "", id)
    name = $0; sub(/^c?fn=\([0-9]+\) ?/, "", name)
    if (name != "") names[id] = name
    if ($1 ~ /^cfn=/) cur = id
    next
  }
  /^calls=/ {
    n = $1; sub(/^calls=/, "", n); name = names[cur]; incl = 0
    if (index(name, pre) == 1) { op = substr(name, length(pre) + 1); per[op] += n; incl = 1 }
    next
  }
  incl && /^[0-9+*-]/ { ir[op] += $2; incl = 0; next }
  { incl = 0 }
  END { for (op in per) printf "%s %d %d %.1f\n", op, per[op], ir[op], ir[op] / per[op] }' "$DUMP" |
  sort > "$OUTDIR/requests.txt" # op, calls, inclusive Ir of the handler, Ir/call
requests=$(awk '{ n += $2 } END { print n + 0 }' "$OUTDIR/requests.txt")

callgrind_annotate --inclusive=yes --threshold=100 "$DUMP" 2> /dev/null |
  sed -n '1,80p' > "$OUTDIR/top.txt"
{
  echo "(The dump is taken while the worker is inside its loop: the rows at 100%"
  echo "on top, clone .. call_once, are those frames in progress, not self cost.)"
  callgrind_annotate --inclusive=no --threshold=100 "$DUMP" 2> /dev/null | sed -n '1,80p'
} > "$OUTDIR/self.txt"

echo
echo "stats:             $stats (expected requests: $((stats * 9)))"
echo "requests:          $requests ($(awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }' "$OUTDIR/requests.txt"))"
echo "Ir, read to reply: $ir"
if [ "$requests" -gt 0 ]; then
  awk -v ir="$ir" -v n="$requests" 'BEGIN { printf "Ir/request:        %.1f\n", ir / n }'
fi
awk '{ printf "  handler %-10s %8d calls, %6.1f Ir/call inclusive (parse and read not included)\n", $1, $2, $4 }' \
  "$OUTDIR/requests.txt"
if [ "$totals" != "$ir" ]; then
  echo "WARNING: callgrind summary $ir != totals $totals"
fi
if [ "$requests" != $((stats * 9)) ]; then
  echo "NOTE: $requests requests counted, $((stats * 9)) expected (9 per stat)"
fi
echo "breakdown: $OUTDIR/top.txt (inclusive), $OUTDIR/self.txt (self); dump: $DUMP"
echo
echo "top functions by inclusive Ir within the requests, below the worker thread's"
echo "entry (file:function: callgrind_annotate splits inlined code by source file):"
echo "Ir/request  Ir  (%)  file:function"
awk -v n="$requests" '/^-+$/ { d++; next }
  d >= 4 && /^ *[0-9]/ && !/PROGRAM TOTALS/ && !/\(100\.0%\)/ {
    ir = $1; gsub(/,/, "", ir); printf "%8.1f  %s\n", (n > 0 ? ir / n : 0), $0
  }' "$OUTDIR/top.txt" | sed -n '1,18p' | cut -c1-230
