package remote

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mevedel/mevedel-exec/process"
)

// A look asks the host's control shell what the kernel says of a running
// command, as process.WaitingForInput and process.Listening do here:
// "look wait" whether the terminal's foreground group is blocked reading
// the terminal (or waiting for a child that is), from /proc/PID/syscall
// (x86_64 and aarch64; read and readv only), without a fork; "look ports"
// the TCP ports the leader's tree listens on, with one find for the
// tree's socket inodes. The answer is "look W PORTS": W is 1 when
// waiting, PORTS "-" or comma-separated LOCAL/PID, LOCAL as
// /proc/net/tcp writes it.

const actLook = "look"

// lookFunctions are the control shell's look functions (see
// controlScript, which calls look for act "look").
const lookFunctions = `# lookTree: the leader and its descendants, by the kernel's children lists.
lookTree() {
  local i=0 p f kids
  tree=($pid)
  while [ $i -lt ${#tree[@]} ]; do
    p=${tree[$i]} i=$((i+1))
    for f in /proc/$p/task/*/children; do
      kids=()
      read -r -a kids 2>/dev/null <$f
      tree+=("${kids[@]}")
    done
  done
}
# lookWait: sets w to 1 when the foreground group reads the terminal.
lookWait() {
  local s tty tp major minor pts p sc fd nread nreadv nwait4 nwaitid busy=0
  w=0
  case $HOSTTYPE in
    x86_64) nread=0 nreadv=19 nwait4=61 nwaitid=247 ;;
    aarch64) nread=63 nreadv=65 nwait4=260 nwaitid=95 ;;
    *) return ;;
  esac
  read -r s 2>/dev/null </proc/$pid/stat || return
  set -- ${s##*) }
  [ "${20}" = "$start" ] || return
  tty=$5 tp=$6
  (( tty != 0 && tp > 0 )) || return
  major=$(( (tty >> 8) & 0xfff )) minor=$(( (tty & 0xff) | ((tty >> 12) & 0xfff00) ))
  (( major >= 136 && major <= 143 )) || return
  pts=/dev/pts/$(( (major - 136) * 256 + minor ))
  for p in "${tree[@]}"; do
    read -r s 2>/dev/null </proc/$p/stat || continue
    set -- ${s##*) }
    [ "$3" = "$tp" ] || continue
    case $1 in Z|X|x) continue ;; S) ;; *) busy=1; break ;; esac
    sc=()
    read -r -a sc 2>/dev/null </proc/$p/syscall
    case ${sc[0]} in
      $nread|$nreadv)
        fd=$(( ${sc[1]:-0} ))
        if [[ /proc/$p/fd/$fd -ef $pts || /proc/$p/fd/$fd -ef /dev/tty ]]; then w=1; else busy=1; break; fi ;;
      $nwait4|$nwaitid) ;;
      *) busy=1; break ;;
    esac
  done
  [ $busy = 0 ] || w=0
}
# lookPorts: sets ports to the tree's listening sockets.
lookPorts() {
  local -A own=()
  local line p ino f lines dirs=()
  ports=
  for p in "${tree[@]}"; do dirs+=(/proc/$p/fd); done
  mapfile -t lines < <(find "${dirs[@]}" -maxdepth 1 -lname 'socket:*' -printf '%h %l\n' 2>/dev/null)
  for line in "${lines[@]}"; do
    p=${line#/proc/} p=${p%%/*} ino=${line##*socket:[} ino=${ino%]}
    [ -n "${own[$ino]}" ] || own[$ino]=$p
  done
  if [ ${#own[@]} -gt 0 ]; then
    for f in /proc/$pid/net/tcp /proc/$pid/net/tcp6; do
      mapfile -t lines 2>/dev/null <$f || continue
      for line in "${lines[@]:1}"; do
        set -- $line
        [ "$4" = 0A ] && [ -n "${own[${10}]}" ] && ports="$ports${ports:+,}$2/${own[${10}]}"
      done
    done
  fi
}
# look: only while the leader with its start time holds the pid.
look() {
  local tree w=0 ports= s
  if read -r s 2>/dev/null </proc/$pid/stat && set -- ${s##*) } && [ "${20}" = "$start" ]; then
    lookTree
    if [ "$sig" = wait ]; then lookWait; else lookPorts; fi
  fi
  echo "look $w ${ports:--}"
}
`

// look sends one look request (what: "wait" or "ports").
func (g *Group) look(ctx context.Context, what string) (bool, []process.Listener, error) {
	line, replaced, err := g.ask(ctx, controlRequest(g.id, actLook, what))
	if err != nil || replaced {
		return false, nil, err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != actLook {
		return false, nil, fmt.Errorf("remote: %s: unexpected look answer %q", g.target.Target, line)
	}
	var ls []process.Listener
	if f[2] != "-" {
		for _, item := range strings.Split(f[2], ",") {
			addr, pid, _ := strings.Cut(item, "/")
			a, port, ok := process.ParseProcAddr(addr)
			n, err := strconv.Atoi(pid)
			if !ok || err != nil {
				return false, nil, fmt.Errorf("remote: %s: unexpected look answer %q", g.target.Target, line)
			}
			ls = append(ls, process.Listener{Address: a, Port: port, Pid: n})
		}
	}
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i], ls[j]
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		if a.Address != b.Address {
			return a.Address < b.Address
		}
		return a.Pid < b.Pid
	})
	return f[1] == "1", ls, nil
}

// WaitingForInput reports whether the command waits for terminal input
// (always false without a terminal).
func (proc *Process) WaitingForInput(ctx context.Context) (bool, error) {
	if !proc.grp.id.TTY {
		return false, nil
	}
	w, _, err := proc.grp.look(ctx, "wait")
	return w, err
}

// Listening returns the TCP ports the command's process tree listens on.
func (proc *Process) Listening(ctx context.Context) ([]process.Listener, error) {
	_, ls, err := proc.grp.look(ctx, "ports")
	return ls, err
}
