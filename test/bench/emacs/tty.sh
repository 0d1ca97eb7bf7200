#!/usr/bin/env bash
# Runs an Emacs benchmark that needs redisplay in an `emacs -nw' on a
# private tmux server, with a private HOME, and prints its report (the
# file the benchmark writes to $MEVEDEL_BENCH_OUT before it exits).
#
#   test/bench/emacs/tty.sh test/bench/emacs/firstoutput.el
set -euo pipefail
cd "$(dirname "$0")/../../.."
el=$1
dir=$(mktemp -d)
sock="$dir/tmux"
pane=""
# Emacs is ended before its terminal: one whose tty hangs up while its
# helper runs can spin instead of exiting.
# Under set -e a failing command in the trap would be the script's status
# (the kill when Emacs has gone, kill-server when tmux has), hence set +e.
trap 'set +e; [ -n "$pane" ] && kill -9 "$pane" 2>/dev/null; tmux -S "$sock" kill-server 2>/dev/null; rm -rf "$dir"; true' EXIT
mkdir -m 700 "$dir/home"
out="$dir/report"
# An Emacs with native compilation would otherwise compile, in Emacs
# processes of its own, each library the benchmark loads that has no
# native code yet (with a fresh HOME, all but the preloaded ones): work
# on the machine's CPUs, during the runs, that has nothing to do with
# what is measured. Both sides run byte code, as they did before. The
# terminal's library, loaded before this option applies, is waited for
# (bench-common-no-native-compilation).
tmux -S "$sock" new-session -d -x 120 -y 40 \
  env HOME="$dir/home" MEVEDEL_BENCH_OUT="$out" MEVEDEL_BENCH_COMMAND="${MEVEDEL_BENCH_COMMAND:-}" MEVEDEL_BENCH_TRACE="${MEVEDEL_BENCH_TRACE:-}" MEVEDEL_EXEC_PROGRAM="$PWD/bin/mevedel-exec" \
  emacs -nw -Q -L elisp -L test/bench/emacs --eval '(setq native-comp-deferred-compilation nil)' -l "$el"
pane=$(tmux -S "$sock" list-panes -F '#{pane_pid}')
# Bounded: a benchmark that hangs is reported with its last screen.
for _ in $(seq 3000); do
  if [ -s "$out" ] && ! tmux -S "$sock" has-session 2>/dev/null; then break; fi
  sleep 0.1
done
if [ ! -s "$out" ]; then
  echo "the benchmark wrote no report; its screen:" >&2
  tmux -S "$sock" capture-pane -p >&2 || true
  exit 1
fi
cat "$out"
! grep -q '^error:' "$out"
