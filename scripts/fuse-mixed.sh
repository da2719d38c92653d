#!/bin/bash
# 60 s mixed workload on a mounted memfs: two shell loops create, stat,
# hard-link (in the same directory and across directories), rename, list
# and delete files in one directory while the daemon serves them; every
# name of a file must show its content and its link count. Prints every
# unexpected error (none expected), the rounds each loop made, and the
# daemon's unmount report (expected: 0 nodes referenced).
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
  local i=$1 n=0 end=$((SECONDS + SECS)) f d p
  while [ $SECONDS -lt $end ]; do
    n=$((n + 1)); f=$M/shared; d=$M/shared/d$i.$n
    echo "$i $n" > "$f/f$i.$n" || echo "ERR create $i $n"
    stat -c %s "$f/f$i.$n" > /dev/null || echo "ERR stat $i $n"
    ln "$f/f$i.$n" "$f/h$i.$n" || echo "ERR link $i $n"
    mv "$f/f$i.$n" "$f/g$i.$n" || echo "ERR rename $i $n"
    { mkdir "$d" && mv "$f/g$i.$n" "$d/"; } || echo "ERR mkdir+rename $i $n"
    ln "$f/h$i.$n" "$d/l$i.$n" || echo "ERR link across directories $i $n"
    # Three names of one file: each shows the content and 3 links.
    for p in "$d/g$i.$n" "$f/h$i.$n" "$d/l$i.$n"; do
      [ "$(cat "$p")" = "$i $n" ] || echo "ERR content ${p#$M/}"
      [ "$(stat -c %h "$p")" = 3 ] || echo "ERR nlink ${p#$M/}: $(stat -c %h "$p"), expected 3"
    done
    ls "$f" > /dev/null || echo "ERR ls $i $n"
    # Remove one name: the other two see 2 links.
    rm "$f/h$i.$n" || echo "ERR rm link $i $n"
    for p in "$d/g$i.$n" "$d/l$i.$n"; do
      [ "$(stat -c %h "$p")" = 2 ] || echo "ERR nlink ${p#$M/}: $(stat -c %h "$p"), expected 2"
    done
    rm -r "$d" || echo "ERR rm $i $n"
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
