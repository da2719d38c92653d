# Sourced by scripts/callgrind-stat.sh and scripts/callgrind-batch.sh:
# from one callgrind output file, the event totals and how often functions
# whose names match PAT (an awk regex) were called.
#   awk -v pat='REGEX' -f scripts/callgrind-count.awk callgrind.out
# Prints "events: <names>", "totals: <numbers>" and "calls: <n>".
/^events:/ { print; next }
/^totals:/ { print; next }
/^c?fn=\([0-9]+\)/ {
    id = $1; sub(/^c?fn=/, "", id)
    name = $0; sub(/^c?fn=\([0-9]+\) ?/, "", name)
    if (name != "") names[id] = name
    if ($0 ~ /^cfn=/) { want = (names[id] ~ pat) } else { want = 0 }
    next
}
/^calls=/ {
    if (want) { n = $0; sub(/^calls=/, "", n); split(n, a, " "); calls += a[1] }
    want = 0
    next
}
END { print "calls: " calls + 0 }
