#!/usr/bin/env bash
# The background-work panel as a person sees it: Emacs in a terminal
# (tmux, 160x40), two background commands, the panel, then `k` on the
# "sleeper" row and RET on the "ticker" row.
#
# Usage: test/tui/panel.sh ARTIFACT-DIR
#
# Writes ARTIFACT-DIR/before.txt (the screen once both rows show),
# ARTIFACT-DIR/after.txt (once the sleeper is stopped and gone),
# ARTIFACT-DIR/inspector.txt (the ticker's inspector showing its output),
# and ARTIFACT-DIR/helper-stderr.txt when Emacs exits.  Runs the helper named
# by MEVEDEL_EXEC_PROGRAM (default bin/mevedel-exec).  Everything runs
# with HOME=ARTIFACT-DIR/home and a private tmux server, killed on exit.
# Every wait polls the screen with a bound; exit status 0 only when each
# step was seen on screen.
set -euo pipefail

out=${1:?usage: panel.sh ARTIFACT-DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
program=${MEVEDEL_EXEC_PROGRAM:-$root/bin/mevedel-exec}

die() { echo "panel.sh: $*" >&2; exit 1; }
command -v tmux >/dev/null || die "tmux is not installed"
command -v emacs >/dev/null || die "emacs is not installed"
[ -x "$program" ] || die "no helper at $program (make build, or set MEVEDEL_EXEC_PROGRAM)"

mkdir -p "$out/home" "$out/state"
out=$(cd "$out" && pwd)
sock=$out/tmux.sock
# The tmux server and everything under it get the private HOME.
export HOME=$out/home

t() { tmux -S "$sock" -f /dev/null "$@"; }
cleanup() { t kill-server >/dev/null 2>&1 || true; }
trap cleanup EXIT

screen() { t capture-pane -p -t panel 2>/dev/null || true; }

# wait_for SECONDS WHAT PREDICATE: poll the screen until PREDICATE (a
# function reading the screen on stdin) holds.
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

both_running() {
	local s
	s=$(cat)
	grep -q 'ticker .*running' <<<"$s" && grep -q 'sleeper .*running' <<<"$s"
}

# The sleeper's row is gone and the echo area says the stop settled it.
sleeper_done() {
	local s
	s=$(cat)
	grep -q 'ticker .*running' <<<"$s" && ! grep -q ' sleeper ' <<<"$s" &&
		grep -q 'mevedel-exec: exec-[a-z0-9]*-[0-9]* stopped' <<<"$s"
}

# The ticker's row was redrawn from a later change event: its runtime is
# no longer 0s. Nothing redraws on a clock, so this shows that events
# about its growing output reach the panel.
ticker_followed() {
	grep -Eq ' ticker +running +([1-9][0-9]*s|[0-9]+m[0-9]+s|[0-9]+h[0-9]+m) +[0-9.]+ [KMG]?i?B'
}

# The inspector under the ticker's row shows its facts and its last lines.
inspector_open() {
	local s
	s=$(cat)
	grep -q 'state running' <<<"$s" && grep -q '| tick' <<<"$s"
}

cd "$out"
t new-session -d -s panel -x 160 -y 40 \
	env HOME="$HOME" TERM=xterm-256color LANG=C.UTF-8 \
	MEVEDEL_EXEC_PROGRAM="$program" \
	MEVEDEL_TUI_STATE="$out/state" \
	MEVEDEL_TUI_ARTIFACTS="$out" \
	emacs -nw -Q -L "$root/elisp" -l "$here/panel-driver.el"

wait_for 20 "both rows to run" both_running
screen >"$out/before.txt"

# As a person would: find the sleeper's row, stop it.
t send-keys -t panel M-\< C-s sleeper Enter
t send-keys -t panel k
wait_for 15 "the sleeper to stop" sleeper_done
screen >"$out/after.txt"

wait_for 15 "the ticker's row to follow its output" ticker_followed

# Expand the ticker's row in place.
t send-keys -t panel M-\< C-s ticker Enter
t send-keys -t panel Enter
wait_for 15 "the ticker's inspector" inspector_open
screen >"$out/inspector.txt"

# Quit as a person would; the facade's kill-emacs-hook shuts the helper
# down.  Answer a confirmation if Emacs asks one.
t send-keys -t panel C-x C-c
deadline=$(($(date +%s%N) + 10 * 1000000000))
while t has-session -t panel 2>/dev/null; do
	if [ "$(date +%s%N)" -ge "$deadline" ]; then
		screen >"$out/quit.txt"
		die "Emacs did not exit; the screen is in $out/quit.txt"
	fi
	if screen | grep -q '(yes or no)'; then t send-keys -t panel yes Enter; fi
	if screen | grep -q '(y or n)'; then t send-keys -t panel y; fi
	sleep 0.1
done
echo "panel.sh: ok ($out)"
