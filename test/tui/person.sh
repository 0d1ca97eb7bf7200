#!/usr/bin/env bash
# A person's Emacs, 80 columns wide (tmux, 80x30): everything through M-x
# and keys, nothing in Lisp.
#
#  1. M-x mevedel-execution-shell-command runs a command that prints a red
#     line, then waits on a gate; the output buffer shows it, coloured.
#  2. The gate opens: the rest of the output (an error line) appears by
#     itself, and the echo area says the command failed.
#  3. M-g n visits main.c at the error's line.
#  4. M-x mevedel-execution-panel: the failed command stays as a row,
#     "failed 2", every column visible at 80 columns; d dismisses it.
#  5. Two terminal commands: B (started first) waits on a gate, A reads a
#     line.  With point on A, s opens the prompt; B ends while it is open
#     (its row moves under point); the typed line still reaches A.
#  5b. Through M-x, a command's first line is on screen soon after it was
#     written (the time it took is in first-output-ms.txt).
#  6. With one command still running, C-x C-c asks, naming it; "yes" ends
#     Emacs and the helper.
#
# Usage: test/tui/person.sh ARTIFACT-DIR
#
# Writes the screens it checks to ARTIFACT-DIR (live.txt, live-colour.txt,
# followed.txt, visited.txt, panel.txt, dismissed.txt, input.txt,
# output-a.txt, quit.txt) and helper-stderr.txt when Emacs exits.  Every
# wait polls the screen with a bound; exit status 0 only when each step
# was seen on screen.
set -euo pipefail

out=${1:?usage: person.sh ARTIFACT-DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
program=${MEVEDEL_EXEC_PROGRAM:-$root/bin/mevedel-exec}

die() { echo "person.sh: $*" >&2; exit 1; }
command -v tmux >/dev/null || die "tmux is not installed"
command -v emacs >/dev/null || die "emacs is not installed"
[ -x "$program" ] || die "no helper at $program (make build, or set MEVEDEL_EXEC_PROGRAM)"

mkdir -p "$out/home" "$out/state" "$out/project"
out=$(cd "$out" && pwd)
sock=$out/tmux.sock
export HOME=$out/home
project=$out/project
printf 'int main(void)\n{ return 0 }\n' >"$project/main.c"
for g in gate1 gateB gateC; do rm -f "$project/$g"; mkfifo "$project/$g"; done

t() { tmux -S "$sock" -f /dev/null "$@"; }
cleanup() { t kill-server >/dev/null 2>&1 || true; }
trap cleanup EXIT

screen() { t capture-pane -p -t person 2>/dev/null || true; }
colours() { t capture-pane -e -p -t person 2>/dev/null || true; }

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

# open_gate NAME: let the command waiting on the fifo NAME go on.
open_gate() { timeout 20 sh -c 'echo go > "$1"' sh "$project/$1" || die "nobody read $1"; }

# mx COMMAND: type M-x COMMAND RET.
mx() { t send-keys -t person M-x; t send-keys -t person -l "$1"; t send-keys -t person Enter; }

cd "$project"
t new-session -d -s person -x 80 -y 30 \
	env HOME="$HOME" TERM=xterm-256color LANG=C.UTF-8 \
	MEVEDEL_EXEC_PROGRAM="$program" \
	MEVEDEL_TUI_STATE="$out/state" \
	MEVEDEL_TUI_ARTIFACTS="$out" \
	emacs -nw -Q -L "$root/elisp" -l "$here/person-driver.el"

scratch_up() { grep -q '\*scratch\*'; }
wait_for 20 "Emacs to start" scratch_up

# 1. A command through M-x; its output buffer fills as it runs.
mx mevedel-execution-shell-command
prompted() { grep -q 'through mevedel-exec: *$'; }
wait_for 20 "the command prompt" prompted
t send-keys -t person -l "printf '\\033[31mred alert\\033[0m\\n'; echo first; read -r _ < gate1; echo second; echo 'main.c:2:3: error: missing semicolon'; exit 2"
t send-keys -t person Enter
live() { local s; s=$(cat); grep -q '^red alert' <<<"$s" && grep -q '^first' <<<"$s" && grep -q 'running' <<<"$s"; }
wait_for 20 "the live output buffer" live
screen >"$out/live.txt"
colours >"$out/live-colour.txt"

# 2. Nothing typed: the rest comes by itself, and the end is said.
open_gate gate1
followed() {
	local s; s=$(cat)
	grep -q '^second' <<<"$s" && grep -q '^main.c:2:3: error: missing semicolon' <<<"$s" &&
		grep -q 'failed (exit 2)' <<<"$s"
}
wait_for 20 "the rest of the output and the failure" followed
screen >"$out/followed.txt"
# The end was said (in the echo area, which M-x's own hint may have
# cleared since; *Messages* keeps it).
t send-keys -t person C-h e
# At 80 columns the line wraps: its start and its end.
said() { local s; s=$(sed 's/\\$//' | tr -d '\n'); grep -Eq "Command (.|‘)printf .*(.|’) failed \(exit code 2\)" <<<"$s"; }
wait_for 20 "the message saying the command failed" said
screen >"$out/messages.txt"
t send-keys -t person q

# 3. next-error visits the error.
t send-keys -t person M-g n
visited() { grep -Eq 'main\.c +.*L2'; }
wait_for 20 "main.c at line 2" visited
screen >"$out/visited.txt"

# 4. The panel keeps the failed command; d dismisses it.
mx mevedel-execution-panel
t send-keys -t person C-x 1
failed_row() { grep -Eq '^ +[0-9]{6} .*failed 2 '; }
wait_for 20 "the failed row in the panel" failed_row
screen >"$out/panel.txt"
t send-keys -t person M-\< d
dismissed() { local s; s=$(cat); ! grep -q 'failed 2' <<<"$s" && grep -q 'No background work' <<<"$s"; }
wait_for 20 "the failed row to be dismissed" dismissed
screen >"$out/dismissed.txt"

# 5. B, then A, each with a terminal (C-u).  Point on A; s; B ends while
# the prompt is up; the line goes to A.
t send-keys -t person C-u
mx mevedel-execution-shell-command
wait_for 20 "the terminal command prompt" prompted
t send-keys -t person -l 'read -r _ < gateB; echo B done'
t send-keys -t person Enter
t send-keys -t person C-x 1
t send-keys -t person C-u
mx mevedel-execution-shell-command
wait_for 20 "the terminal command prompt" prompted
t send-keys -t person -l 'read -r l; echo "A got:$l"'
t send-keys -t person Enter
mx mevedel-execution-panel
t send-keys -t person C-x 1
# A, reading its terminal, may show as waiting by the time the panel
# draws (a loaded machine draws it late).
two_live() { [ "$(grep -Ec ' (running|waiting) ')" -ge 2 ]; }
wait_for 20 "two live rows" two_live
# A is the second row: down to it, as a person would.
t send-keys -t person M-\< n s
input_prompt() { grep -q 'Input to "read -r l; echo "A got'; }
wait_for 20 "the input prompt for A" input_prompt
open_gate gateB
b_ended() { grep -q 'completed 0'; }
wait_for 20 "B to end while the prompt is up" b_ended
t send-keys -t person -l hello
t send-keys -t person Enter
a_done() { [ "$(grep -c 'completed 0')" -ge 2 ]; }
wait_for 20 "A to end with its line" a_done
screen >"$out/input.txt"
# A's output holds the line (A ended last: its row comes first).
t send-keys -t person M-\< o
a_output() { grep -q '^A got:hello'; }
wait_for 20 "A's output" a_output
screen >"$out/output-a.txt"

# 5b. A command's first output is on screen soon after it arrives, on a
# warm helper, through M-x as typed: the command prints the time it
# writes (ms), the screen is polled until that line shows.
mx mevedel-execution-shell-command
wait_for 20 "the command prompt" prompted
t send-keys -t person -l 'sleep 0.5; echo "stamp:$(date +%s%3N)"'
t send-keys -t person Enter
deadline=$(($(date +%s%N) + 20 * 1000000000))
while :; do
	stamp=$(screen | sed -n 's/^stamp:\([0-9]\{13\}\) *$/\1/p' | head -1)
	if [ -n "$stamp" ]; then
		echo $(($(date +%s%3N) - stamp)) >"$out/first-output-ms.txt"
		break
	fi
	[ "$(date +%s%N)" -lt "$deadline" ] || die "the first output never showed"
	sleep 0.01
done
screen >"$out/first-output.txt"
stamp_done() { grep -q 'stamp.*completed (exit 0)'; }
wait_for 20 "the command to end" stamp_done

# 6. Something runs; C-x C-c asks, naming it.
mx mevedel-execution-shell-command
wait_for 20 "the command prompt" prompted
t send-keys -t person -l 'read -r _ < gateC'
t send-keys -t person Enter
asked() { grep -q '1 command still running under mevedel-exec'; }
t send-keys -t person C-x C-c
wait_for 20 "the exit question" asked
screen >"$out/quit.txt"
t send-keys -t person -l yes
t send-keys -t person Enter
deadline=$(($(date +%s%N) + 15 * 1000000000))
while t has-session -t person 2>/dev/null; do
	if [ "$(date +%s%N)" -ge "$deadline" ]; then
		screen >"$out/exit-timeout.txt"
		die "Emacs did not exit; the screen is in $out/exit-timeout.txt"
	fi
	sleep 0.1
done
echo "person.sh: ok ($out)"
