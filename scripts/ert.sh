#!/usr/bin/env bash
# Runs the ERT suite as three Emacs processes side by side. Its tests
# mostly wait on their helper and its commands, so three shards take about
# a third of one run's time. Each shard's report is printed whole once all
# are done; the run fails when any shard does.
set -uo pipefail
cd "$(dirname "$0")/.."
shards=3
# Seconds each file took in one run: the shards are balanced on these, and
# a file not named here counts as one second.
declare -A weight=([attention]=9 [oneshot]=8 [person]=4 [panel]=4 [mailbox]=4 [install]=4
  [execution]=4 [ready]=3 [filter]=2)
declare -a files load
for ((i = 0; i < shards; i++)); do files[i]=""; load[i]=0; done
# Heaviest first, each to the lightest shard so far.
for f in $(for f in test/elisp/*-test.el; do
             n=$(basename "$f" -test.el); n=${n#mevedel-execution-}; n=${n#mevedel-}
             echo "${weight[$n]:-1} $f"
           done | sort -rn | cut -d' ' -f2); do
  n=$(basename "$f" -test.el); n=${n#mevedel-execution-}; n=${n#mevedel-}
  best=0
  for ((i = 1; i < shards; i++)); do ((load[i] < load[best])) && best=$i; done
  files[best]+=" $f"; ((load[best] += ${weight[$n]:-1}))
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for ((i = 0; i < shards; i++)); do
  # shellcheck disable=SC2086 # the list is of file names without spaces
  eask test ert ${files[i]} >"$dir/$i" 2>&1 &
  pids[i]=$!
done
status=0
for ((i = 0; i < shards; i++)); do
  wait "${pids[i]}" || status=1
  echo "== ERT shard $((i + 1)) of $shards:${files[i]}"
  cat "$dir/$i"
done
exit $status
