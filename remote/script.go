package remote

import (
	"fmt"
	"strconv"
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

// The channel's command starts bash with the command's environment
// already in place (env -i, or env on top of sshd's environment), so that
// the last step is a single exec of bash -c COMMAND. That bash, the
// wrapper, runs as the channel's own process (every step is an exec, so
// the pid sshd waits for is the command's): it makes sure that process
// leads its own group (sshd already makes it a session leader; setsid
// where not), merges stderr into stdout in pipe mode, enters the
// directory, prints the identity line and execs bash -c COMMAND.
//
// The wrapper runs with the user's exported functions imported, so every
// command it runs is a keyword or goes through builtin. BASH_ENV, SHELLOPTS
// and BASHOPTS would act on the wrapper itself: they are kept out of its
// environment and given to the command by env at its exec.

// identityPrologue finds the process's group and start time; $1 is
// "again" after the setsid re-exec.
const identityPrologue = `again=$1
builtin read -r s </proc/$$/stat || {
  builtin printf '\0MEVEDEL-EXEC-ERR no /proc on the host: only Linux hosts are supported\n'
  builtin exit 125
}
builtin set -- ${s##*) }
if [[ $3 != "$$" ]]; then
  [[ -z $again ]] && builtin exec "$(PATH=$PATH:/usr/bin:/bin builtin command -v setsid)" "$BASH" -c "$BASH_EXECUTION_STRING" mevedel-exec again
  builtin printf '\0MEVEDEL-EXEC-ERR cannot make a process group of its own\n'
  builtin exit 125
fi
pgid=$3 start=${20}
`

// hostile are variables that would change how the wrapper itself runs.
var hostile = map[string]bool{"BASH_ENV": true, "SHELLOPTS": true, "BASHOPTS": true}

// wrapperCommand is the exec command of one execution started on a fresh
// channel.
func wrapperCommand(spec launchSpec) string {
	env := spec.Env
	if spec.Tag != "" {
		env = append(env[:len(env):len(env)], spec.Tag)
	}
	return launchCommand(env, spec.Env == nil || spec.overlay, identityPrologue+commandTail(spec, nil, nil))
}

// launchCommand is the channel's command: bash running script with the
// environment env, on top of sshd's when overlay.
func launchCommand(env []string, overlay bool, script string) string {
	var b strings.Builder
	if overlay {
		// Without these, bash takes itself for a shell started by sshd
		// and reads ~/.bashrc (Debian builds it so).
		b.WriteString("unset SSH_CLIENT SSH2_CLIENT; exec env")
	} else {
		b.WriteString("exec env -i")
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !hostile[k] {
			b.WriteString(" " + shq(kv))
		}
	}
	b.WriteString(" bash -c " + shq(script) + " mevedel-exec")
	return b.String()
}

// commandTail runs in the wrapper once the command is known: it applies
// unset and export (the difference between the wrapper's environment and
// the command's), enters the directory, prints the identity line and
// execs the command.
func commandTail(spec launchSpec, unset, export []string) string {
	var b strings.Builder
	if len(unset) > 0 {
		b.WriteString("builtin unset -v")
		for _, k := range unset {
			b.WriteString(" " + shq(k))
		}
		b.WriteString("\n")
	}
	if len(export) > 0 {
		b.WriteString("builtin export")
		for _, kv := range export {
			b.WriteString(" " + shq(kv))
		}
		b.WriteString("\n")
	}
	if d := dirWord(spec.Dir); d != "" {
		fmt.Fprintf(&b, `CDPATH= builtin cd -- %[1]s 2>/dev/null || {
  m=$(CDPATH= builtin cd -- %[1]s 2>&1)
  builtin printf '\0MEVEDEL-EXEC-ERR working directory: %%s\n' "${m//$'\n'/ }"
  builtin exit 1
}
`, d)
	}
	b.WriteString("builtin unset -v OLDPWD\n")
	b.WriteString(`builtin printf '\0MEVEDEL-EXEC %s %s %s\n' "$$" "$pgid" "$start"` + "\n")
	b.WriteString("builtin exec")
	var late []string // what the wrapper must not see
	for _, kv := range spec.Env {
		if k, _, _ := strings.Cut(kv, "="); hostile[k] {
			late = append(late, kv)
		}
	}
	if len(late) > 0 {
		b.WriteString(" env")
		for _, kv := range late {
			b.WriteString(" " + shq(kv))
		}
	}
	b.WriteString(` "$BASH" -c ` + shq(spec.Command))
	if !spec.TTY {
		// On the exec itself: builtin undoes a redirection-only exec.
		b.WriteString(" 2>&1 </dev/null")
	}
	b.WriteString("\n")
	return b.String()
}

// specEnd closes a standby's spec: a spec cut short by a lost channel
// is never run.
const specEnd = "\n#MEVEDEL-EXEC-END\n"

// standbyScript is a wrapper that waits for its command: it runs the
// identity prologue at once, then reads the rest of its script (a
// commandTail) from stdin up to EOF and runs it. Reading to EOF in the C
// locale takes a few large reads whatever the bytes.
func standbyScript() string {
	return identityPrologue + `LC_ALL=C IFS= builtin read -r -N 16777216 spec
[[ $spec == *` + shq(specEnd) + ` ]] || builtin exit 0
builtin eval "$spec"
`
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
	actAwait   = "await"
	// actLook is in look.go.
)

// ctlReady is the controller's first line, after whatever the login
// shell printed.
const ctlReady = "\x00MEVEDEL-EXEC-CTL\n"

// controllerCommand is a shell that stays on one channel per connection
// and answers control requests, one line each way, so a probe costs a
// round trip instead of a login shell (whose rc files can take most of a
// second). It is bash because bash reads /proc files in blocks where dash
// reads them byte by byte, and it avoids forks: kill -0 tells an empty
// group without a scan, the group scan is built in, and tagged processes
// are found by reading environments with mapfile (grep, whose exec costs
// more than a small process table, only on a large one or an old bash).
//
// An await request polls the leader about every millisecond until it is
// gone and then answers as a probe; a request arriving meanwhile, or a
// leader still there after awaitPolls polls, makes it answer "pending"
// at once. It scans every environment first, while the command runs, so
// that its probe reads only the processes created since: those whose pid
// follows the last pid handed out at the scan, which is sound as long as
// the pid numbers cannot have come round (checked with the count of tasks
// created, /proc/stat's processes).
//
// Request: "ACT SIG PID PGID START TTY TAG" (TAG "-" for none), after its
// length in four digits: bash reads a line from a pipe a byte at a time,
// a known length in one call. Answer:
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
	return "unset SSH_CLIENT SSH2_CLIENT; exec bash -c " + shq(controlScript)
}

// controlScript is the control shell's bash source: its functions, then
// its request loop (controlLoop).
var controlScript = `export LC_ALL=C
printf '\0MEVEDEL-EXEC-CTL\n'
# kill writes its complaint here, so an empty group (ESRCH) is told from
# one whose members we may not signal (EPERM).
exec {kp}<> <(:) || kp=
# Never written: a read of it with a timeout is a sleep without a fork.
exec {sl}<> <(:) || sl=
mapread=0
(( BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 4) )) && mapread=1
read -r pidmax 2>/dev/null </proc/sys/kernel/pid_max || pidmax=0
# scan PID...: adds to hits those whose environment holds the tag.
scan() {
  local p f e kv fs=() un=() again try s
  if [ $mapread = 1 ] && [ $# -le 600 ]; then
    # One redirection of stderr for the loop: one per file costs more
    # than the read.
    { for p; do
      mapfile -d '' -t e </proc/$p/environ || continue
      [ ${#e[@]} = 0 ] && { un+=($p); continue; }
      [[ ${e[*]} == *"$tag"* ]] || continue
      for kv in "${e[@]}"; do
        [[ $kv == "$tag" ]] && { hits+=($p); break; }
      done
    done; } 2>/dev/null
    # A process in the middle of an execve shows an empty environment
    # until the new image's is in place: read those again, a few times,
    # unless they are older than the leader or kernel threads.
    for try in 1 2 3; do
      [ ${#un[@]} = 0 ] || [ -z "$sl" ] && break
      read -t 0.002 -u $sl _
      again=()
      { for p in "${un[@]}"; do
        read -r s </proc/$p/stat || continue
        set -- ${s##*) }
        (( ${20} >= start )) || continue
        [ "$2" = 2 ] || [ "$2" = 0 ] && continue
        mapfile -d '' -t e </proc/$p/environ || continue
        [ ${#e[@]} = 0 ] && { again+=($p); continue; }
        for kv in "${e[@]}"; do
          [[ $kv == "$tag" ]] && { hits+=($p); break; }
        done
      done; } 2>/dev/null
      un=("${again[@]}")
    done
  elif [ $# -gt 0 ]; then
    for p; do fs+=(/proc/$p/environ); done
    for f in $(grep -lsxzF -e "$tag" "${fs[@]}"); do
      p=${f#/proc/}; hits+=(${p%/environ})
    done
  fi
}
# classify: the live hits started no earlier than the leader; those in
# the group set tgrp, the others are tg (ntg of them).
classify() {
  tg= tgrp=0 ntg=0
  local p s
  for p in "${hits[@]}"; do
    read -r s 2>/dev/null </proc/$p/stat || continue
    set -- ${s##*) }
    case $1 in Z|X|x) continue ;; esac
    (( ${20} >= start )) || continue
    if [ "$3" = "$pgid" ]; then tgrp=1; continue; fi
    tg="$tg $p" ntg=$((ntg+1))
  done
}
tagged() {
  hits=()
  if [ -n "$tag" ]; then
    local ps=(/proc/[0-9]*)
    scan "${ps[@]#/proc/}"
  fi
  classify
}
# counters: the last pid handed out, the tasks there are, and the tasks
# created since boot.
counters() {
  local a b c t line st
  read -r a b c t last </proc/loadavg
  tasks=${t#*/} forks=-1
  mapfile -t st </proc/stat
  for line in "${st[@]}"; do
    [[ $line == "processes "* ]] && { forks=${line#processes }; break; }
  done
}
# since: tagged as tagged() does, from an await's snapshot: what it found
# tagged, and what was created after it (its pid follows the snapshot's
# last pid). False when the pid numbers may have come round meanwhile:
# the cursor moved by at most the tasks created plus those it skipped.
since() {
  counters
  local n=$((forks - f1)) p w=()
  (( forks >= f1 && 2*n + n1 + 300 < pidmax )) || return 1
  hits=()
  local ps=(/proc/[0-9]*)
  for p in "${ps[@]#/proc/}"; do
    (( c1 <= last ? (p > c1 && p <= last) : (p > c1 || p <= last) )) && w+=($p)
  done
  scan "${w[@]}"
  for p in "${h1[@]}"; do
    (( c1 <= last ? (p > c1 && p <= last) : (p > c1 || p <= last) )) || hits+=($p)
  done
  classify
}
` + lookFunctions + controlLoop + `
set -- $req
act=$1 sig=$2 pid=$3 pgid=$4 start=$5 tty=$6 tag=$7
[ "$tag" = - ] && tag=
[ $act = look ] && { look; continue; }
quick=0
if [ $act = await ]; then
  # A full scan now, while the command runs; once the leader is gone
  # only what was created since needs reading.
  if [ -n "$tag" ] && [ "$pidmax" -gt 0 ]; then
    counters
    c1=$last f1=$forks n1=$tasks hits=()
    ps=(/proc/[0-9]*)
    scan "${ps[@]#/proc/}"
    h1=("${hits[@]}")
    [ $f1 -ge 0 ] && quick=1
  fi
  # Poll the leader until it is gone, then probe; a request waiting, or
  # a leader still there after a while, ends the watch.
  i=0
  while [ -n "$sl" ] && read -r s 2>/dev/null </proc/$pid/stat; do
    set -- ${s##*) }
    [ "${20}" = "$start" ] || break
    if (( ++i > ` + strconv.Itoa(awaitPolls) + ` )) || read -t 0; then
      echo "pending - 0 0"
      continue 2
    fi
    read -t 0.001 -u $sl _
  done
  act=probe
fi
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
grp=0 scan=1
if [ $EUID = 0 ]; then
  kill -0 -- -$pgid 2>/dev/null || scan=0 # root may signal anyone: ESRCH
elif [ -n "$kp" ] && ! kill -0 -- -$pgid 2>&$kp; then
  read -r -t 1 -u $kp msg
  [[ $msg == *ermitted* ]] || scan=0
fi
[ $scan = 1 ] && for f in /proc/[0-9]*/stat; do
  read -r s 2>/dev/null <$f || continue
  set -- ${s##*) }
  [ "$3" = "$pgid" ] || continue
  case $1 in Z|X|x) ;; *) grp=$((grp+1)) ;; esac
done
tg= tgrp=0 ntg=0
if [ $act != probe ] || [ $lead = gone ] || [ $grp = 0 ]; then
  if [ $quick = 1 ] && since; then :; else tagged; fi
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

const controlLoop = "while read -r -N 4 n && read -r -N $((10#$n)) req; do"

// controlRequest is one request line for the controller.
func controlRequest(id Identity, act, sig string) string {
	tag, tty := id.Tag, 0
	if tag == "" {
		tag = "-"
	}
	if id.TTY {
		tty = 1
	}
	req := fmt.Sprintf("%s %s %d %d %d %d %s", act, sig, id.Pid, id.Pgid, id.Start, tty, tag)
	return fmt.Sprintf("%04d%s", len(req), req)
}
