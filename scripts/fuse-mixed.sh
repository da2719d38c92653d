#!/bin/bash
# 60 s mixed workload on a mounted memfs: two shell loops create, stat,
# rename, list and delete files in one directory while the daemon serves
# them. Prints every unexpected error (none expected), the rounds each loop
# made, and the daemon's unmount report (expected: 0 nodes referenced).
#
#   scripts/fuse-mixed.sh [DCACHE_BINARY] [MOUNT_OPTIONS] [SECONDS]
#   e.g. scripts/fuse-mixed.sh target/release/dcache poll_us=1000 60
set -u
BIN=${1:-target/release/dcache}; OPTS=${2:-default_permissions}; SECS=${3:-60}
W=$(mktemp -d); M=$W/mnt; mkdir -p "$M"
"$BIN" mount -f --backend mem -o "$OPTS" "$M" 2> "$W/daemon.log" & D=$!
for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
mkdir "$M/shared"
loop() {
  local i=$1 n=0 end=$((SECONDS + SECS)) f
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1)); f=$M/shared
    echo "$i $n" > "$f/f$i.$n" || echo "ERR create $i $n"
    stat -c %s "$f/f$i.$n" > /dev/null || echo "ERR stat $i $n"
    mv "$f/f$i.$n" "$f/g$i.$n" || echo "ERR rename $i $n"
    { mkdir "$f/d$i.$n" && mv "$f/g$i.$n" "$f/d$i.$n/"; } || echo "ERR mkdir+rename $i $n"
    [ "$(cat "$f/d$i.$n/g$i.$n")" = "$i $n" ] || echo "ERR content $i $n"
    ls "$f" > /dev/null || echo "ERR ls $i $n"
    rm -r "$f/d$i.$n" || echo "ERR rm $i $n"
  done
  echo "loop $i: $n rounds"
}
loop 1 > "$W/l1.log" 2>&1 & L1=$!
loop 2 > "$W/l2.log" 2>&1 & L2=$!
wait $L1 $L2
rmdir "$M/shared"
kill -TERM $D; wait $D; rc=$?
cat "$W/l1.log" "$W/l2.log"
errors=$(cat "$W/l1.log" "$W/l2.log" | grep -c '^ERR')
cat "$W/daemon.log"
echo "unexpected errors: $errors, daemon exit status: $rc"
grep -q "unmounted, 0 nodes still referenced" "$W/daemon.log" && [ "$errors" = 0 ] && [ $rc = 0 ]
