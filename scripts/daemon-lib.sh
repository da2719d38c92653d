# Sourced by the FUSE benchmark scripts (fuse-callgrind, fuse-vs-libfuse,
# fuse-uring-bench, mount-bench):
# stopping a FUSE daemon without ever waiting unbounded. The caller sets
# DPID (the daemon's pid), CONN (its fusectl connection number, or empty)
# and ME (the script's name, for messages).

# gone PID SECONDS: true once PID has exited within SECONDS: no such
# process, or a zombie with no thread left (so that wait returns at once).
gone() {
  for _ in $(seq $(($2 * 10))); do
    [ -d "/proc/$1" ] || return 0
    if [ "$(awk '{ print $3 }' "/proc/$1/stat" 2> /dev/null)" = Z ] &&
      [ "$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2> /dev/null | wc -l)" -le 1 ]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# kill_daemon: SIGKILL the daemon in DPID; a thread stuck in a request to
# its own mount keeps it alive, so then abort its FUSE connection (fusectl,
# CONN) too.
kill_daemon() {
  kill -KILL "$DPID" 2> /dev/null || true
  if ! gone "$DPID" 5 && [ -n "$CONN" ] && [ -e "/sys/fs/fuse/connections/$CONN/abort" ]; then
    echo 1 > "/sys/fs/fuse/connections/$CONN/abort" || true
  fi
  if gone "$DPID" 5; then
    wait "$DPID" 2> /dev/null || true
  else
    echo "$ME: daemon $DPID would not die" >&2
  fi
  DPID=
}

# wait_mounted MNT LOG: wait (at most 10 s) until the daemon in DPID has
# mounted MNT, and set CONN; else print its LOG and fail.
wait_mounted() {
  local m=$1 log=$2 i
  for i in $(seq 200); do
    mountpoint -q "$m" && break
    kill -0 "$DPID" 2> /dev/null || break
    sleep 0.05
  done
  mountpoint -q "$m" || { echo "$ME: no mount on $m after ${i}x50 ms:" >&2; cat "$log" >&2; return 1; }
  CONN=$(awk -v m="$m" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)
}

# stop_daemon MNT SECONDS: SIGTERM the daemon in DPID, SIGKILL it (and
# abort its connection) if it is not gone within SECONDS, and make sure
# MNT is unmounted and removed.
stop_daemon() {
  local m=$1
  kill -TERM "$DPID" 2> /dev/null || true
  if gone "$DPID" "$2"; then
    wait "$DPID" 2> /dev/null || true
    DPID=
  else
    echo "$ME: daemon $DPID ignored SIGTERM for $2 s; killed" >&2
    kill_daemon
  fi
  if mountpoint -q "$m"; then
    fusermount3 -u -q "$m" 2> /dev/null || umount "$m" 2> /dev/null ||
      fusermount3 -u -z -q "$m" 2> /dev/null || umount -l "$m"
  fi
  rmdir "$m" 2> /dev/null || true
}
