#!/usr/bin/env bash
# A person's terminal goes away while a command runs (the terminal
# window closed, an SSH session dropped): tmux's server is killed under
# an `emacs -nw' whose M-x command still runs.  Emacs must then exit by
# itself, and the helper and the command with it.
#
# Usage: test/tui/hangup.sh ARTIFACT-DIR
#
# Prints "emacs PID" once the command's output is on screen and the
# terminal is gone; the test then waits for that pid, the helper and the
# command to end.
set -euo pipefail

out=${1:?usage: hangup.sh ARTIFACT-DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
program=${MEVEDEL_EXEC_PROGRAM:-$root/bin/mevedel-exec}

die() { echo "hangup.sh: $*" >&2; exit 1; }
[ -x "$program" ] || die "no helper at $program (make build, or set MEVEDEL_EXEC_PROGRAM)"

mkdir -p "$out/home" "$out/state" "$out/project"
out=$(cd "$out" && pwd)
sock=$out/tmux.sock
export HOME=$out/home

t() { tmux -S "$sock" -f /dev/null "$@"; }
screen() { t capture-pane -p -t person 2>/dev/null || true; }
wait_for() {
	local bound=$1 what=$2 pred=$3 deadline
	deadline=$(($(date +%s%N) + bound * 1000000000))
	while [ "$(date +%s%N)" -lt "$deadline" ]; do
		if screen | "$pred"; then return 0; fi
		sleep 0.1
	done
	screen >"$out/timeout.txt"
	die "timed out after ${bound}s waiting for $what; the screen is in $out/timeout.txt"
}

cd "$out/project"
t new-session -d -s person -x 80 -y 30 \
	env HOME="$HOME" TERM=xterm-256color LANG=C.UTF-8 \
	MEVEDEL_EXEC_PROGRAM="$program" \
	MEVEDEL_TUI_STATE="$out/state" \
	emacs -nw -Q -L "$root/elisp" -l "$here/person-driver.el"
scratch_up() { grep -q '\*scratch\*'; }
wait_for 20 "Emacs to start" scratch_up
pid=$(t list-panes -t person -F '#{pane_pid}')

t send-keys -t person M-x
t send-keys -t person -l mevedel-execution-shell-command
t send-keys -t person Enter
prompted() { grep -q 'through mevedel-exec: *$'; }
wait_for 20 "the command prompt" prompted
t send-keys -t person -l 'echo hangup-started; sleep 1000'
t send-keys -t person Enter
started() { grep -q '^hangup-started'; }
wait_for 20 "the command's output" started

t kill-server
echo "emacs $pid"
