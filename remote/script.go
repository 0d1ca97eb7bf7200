package remote

import (
	"fmt"
	"strings"
)

// The remote side is driven by small shell scripts, one exec channel each.
// The login shell runs the channel's command, so each script starts with
// an exec of a known shell: the login shell must only understand POSIX
// quoting (sh, bash, zsh, ksh; not fish or csh). Fields of /proc/PID/stat
// are split unquoted: after the command name, which is cut off first, they
// are numbers and state letters, never glob characters.

// marker starts the wrapper's identity line; NUL never begins a line a
// login script would print.
const (
	marker    = "\x00MEVEDEL-EXEC "
	markerErr = "\x00MEVEDEL-EXEC-ERR "
)

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// wrapperCommand is the exec command of one execution. The wrapper runs
// in bash as the channel's own process (every step is an exec, so the pid
// sshd waits for is the command's): it makes sure that process leads its
// own group (sshd already makes it a session leader; setsid where not),
// merges stderr into stdout in pipe mode, enters the directory, prints the
// identity line and execs bash -c COMMAND with the environment.
func wrapperCommand(spec Spec) string {
	var b strings.Builder
	b.WriteString(`again=$1
read -r s </proc/$$/stat || {
  printf '\0MEVEDEL-EXEC-ERR no /proc on the host: only Linux hosts are supported\n'
  exit 125
}
set -- ${s##*) }
if [ "$3" != "$$" ]; then
  [ -z "$again" ] && exec setsid "$BASH" -c "$BASH_EXECUTION_STRING" mevedel-exec again
  printf '\0MEVEDEL-EXEC-ERR cannot make a process group of its own\n'
  exit 125
fi
pgid=$3 start=${20}
`)
	if !spec.TTY {
		b.WriteString("exec 2>&1 </dev/null\n")
	}
	if d := dirWord(spec.Dir); d != "" {
		fmt.Fprintf(&b, `cd -- %[1]s 2>/dev/null || {
  m=$(cd -- %[1]s 2>&1)
  printf '\0MEVEDEL-EXEC-ERR working directory: %%s\n' "${m//$'\n'/ }"
  exit 1
}
`, d)
	}
	b.WriteString(`printf '\0MEVEDEL-EXEC %s %s %s\n' "$$" "$pgid" "$start"` + "\n")
	b.WriteString("exec env")
	if spec.Env != nil {
		b.WriteString(" -i")
	}
	b.WriteString(" --")
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
			b.WriteString(" " + shq(kv))
		}
	}
	if spec.Tag != "" {
		b.WriteString(" " + shq(spec.Tag))
	}
	b.WriteString(` "$BASH" -c ` + shq(spec.Command) + "\n")
	// Without these, bash takes itself for a shell started by sshd and
	// reads ~/.bashrc again (Debian builds it so).
	return "unset SSH_CLIENT SSH2_CLIENT; exec bash -c " + shq(b.String()) + " mevedel-exec"
}

// dirWord is dir as a shell word: "~" and "~/..." are under $HOME, and an
// empty dir means no cd (sshd starts commands in the home directory).
func dirWord(dir string) string {
	switch {
	case dir == "":
		return ""
	case dir == "~":
		return `"$HOME"`
	case strings.HasPrefix(dir, "~/"):
		return `"$HOME"/` + shq(dir[2:])
	default:
		return shq(dir)
	}
}

// control actions.
const (
	actProbe   = "probe"
	actSignal  = "signal"
	actInt     = "int"
	actKillTag = "killtag"
)

// ctlReady is the controller's first line, after whatever the login
// shell printed.
const ctlReady = "\x00MEVEDEL-EXEC-CTL\n"

// controllerCommand is a shell that stays on one channel per connection
// and answers control requests, one line each way, so a probe costs a
// round trip instead of a login shell (whose rc files can take most of a
// second). It is bash because bash reads /proc files in blocks where dash
// reads them byte by byte, and it avoids forks: the group scan is built
// in, and grep runs only when tagged processes matter.
//
// Request: "ACT SIG PID PGID START TTY TAG" (TAG "-" for none). Answer:
// "STATE LEADER GROUP PROVEN", where STATE is live, dead or ambiguous,
// LEADER is live, zombie, gone or other (another process has the pid now),
// GROUP counts the group's live members and PROVEN the live processes
// proven ours (-1 when a probe stopped at a live leader).
//
// Proof: the leader with its start time still holds the pid, so the group
// (whose id cannot be reused while the pid is held) is ours; or a group
// member carries the execution's tag. Tagged processes started no earlier
// than the leader are ours wherever they are. Signals go only to what is
// proven, and nothing is signalled once the leader's pid is someone
// else's. Zombies never count.
func controllerCommand() string {
	script := `printf '\0MEVEDEL-EXEC-CTL\n'
tagged() {
  tg= tgrp=0 ntg=0
  [ -n "$tag" ] || return
  local f p s
  for f in $(grep -lsxzF -e "$tag" /proc/[0-9]*/environ); do
    p=${f#/proc/}; p=${p%/environ}
    read -r s 2>/dev/null </proc/$p/stat || continue
    set -- ${s##*) }
    case $1 in Z|X|x) continue ;; esac
    (( ${20} >= start )) || continue
    if [ "$3" = "$pgid" ]; then tgrp=1; continue; fi
    tg="$tg $p" ntg=$((ntg+1))
  done
}
while read -r act sig pid pgid start tty tag; do
[ "$tag" = - ] && tag=
if [ $act = killtag ]; then
  [ -n "$tag" ] &&
  for f in $(grep -lsxzF -e "$tag" /proc/[0-9]*/environ); do
    p=${f#/proc/}; kill -s $sig ${p%/environ} 2>/dev/null
  done
  echo "dead gone 0 0"
  continue
fi
lead=gone tp=0
if read -r s 2>/dev/null </proc/$pid/stat; then
  set -- ${s##*) }
  if [ "${20}" = "$start" ]; then
    case $1 in Z|X|x) lead=zombie ;; *) lead=live ;; esac
    tp=$6
  else
    lead=other
  fi
fi
if [ $lead = other ]; then
  echo "ambiguous other 0 0"
  continue
fi
if [ $act = probe ] && [ $lead = live ]; then
  echo "live live 1 -1"
  continue
fi
grp=0
for f in /proc/[0-9]*/stat; do
  read -r s 2>/dev/null <$f || continue
  set -- ${s##*) }
  [ "$3" = "$pgid" ] || continue
  case $1 in Z|X|x) ;; *) grp=$((grp+1)) ;; esac
done
tg= tgrp=0 ntg=0
if [ $act != probe ] || [ $lead = gone ] || [ $grp = 0 ]; then
  tagged
fi
proven=$tgrp
[ $lead = gone ] || proven=1
n=$ntg
[ $proven = 1 ] && n=$((n+grp))
if [ $n -gt 0 ]; then st=live
elif [ $grp -gt 0 ]; then st=ambiguous
else st=dead
fi
if [ $act != probe ] && [ $st != ambiguous ]; then
  if [ $act = int ]; then
    if [ $tty = 1 ] && [ $lead = live ] && [ "$tp" -gt 0 ]; then
      kill -s INT -- -$tp 2>/dev/null
    elif [ $proven = 1 ]; then
      kill -s INT -- -$pgid 2>/dev/null
    fi
  else
    if [ $proven = 1 ]; then
      kill -s $sig -- -$pgid 2>/dev/null
      [ $sig = TERM ] && kill -s CONT -- -$pgid 2>/dev/null
    fi
    for p in $tg; do
      kill -s $sig $p 2>/dev/null
      [ $sig = TERM ] && kill -s CONT $p 2>/dev/null
    done
  fi
fi
echo "$st $lead $grp $n"
done
`
	return "unset SSH_CLIENT SSH2_CLIENT; exec bash -c " + shq(script)
}

// controlRequest is one request line for the controller.
func controlRequest(id Identity, act, sig string) string {
	tag, tty := id.Tag, 0
	if tag == "" {
		tag = "-"
	}
	if id.TTY {
		tty = 1
	}
	return fmt.Sprintf("%s %s %d %d %d %d %s\n", act, sig, id.Pid, id.Pgid, id.Start, tty, tag)
}
