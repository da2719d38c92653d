# Sourced by scripts/fuse-callgrind.sh and scripts/fuse-vs-libfuse.sh:
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
