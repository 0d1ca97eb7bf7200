package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/client"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/rpc"
	"github.com/mevedel/mevedel-exec/spool"
	"github.com/sourcegraph/jsonrpc2"
)

// The command line of the daemon, for a person at a shell beside Emacs.
// It opens each session it looks at as an observer: user authority, the
// passive events, never a result or a wake (those stay the agent's; a
// stop made here is the person's, and its owner still gets the result).

const cliUsage = `usage:
  mevedel-exec ps [--all] [--json]              executions of every session of the daemon
  mevedel-exec logs ID [-f] [--tail N]          an execution's output (-f: follow until it settles)
  mevedel-exec stop ID...                       stop executions (as the person: the owner gets the result)
  mevedel-exec grep PATTERN [--session S] [--json]  search the output logs (RE2)
  mevedel-exec attach ID [--detach-key C]       a tty execution's terminal here (Ctrl-\ detaches)
  mevedel-exec wait ID [--json]                 wait for the end; exit with its exit code
`

// callBound bounds one request of the command line.
const callBound = 30 * time.Second

// followTick bounds a wait for a change the daemon announces: a follow
// rereads then even without one.
const followTick = time.Second

type cliConn struct {
	c        *client.Client
	notes    chan client.Notification
	sessions []rpc.DaemonSession
	opened   map[string]bool
}

// dialDaemon connects to the running daemon; the command line never
// starts one (it would have nothing to show).
func dialDaemon() (*cliConn, error) {
	sock, err := daemonSocket()
	if err != nil {
		return nil, err
	}
	k := &cliConn{notes: make(chan client.Notification, 256), opened: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	k.c, err = client.Dial(ctx, sock, func(_ *client.Client, n client.Notification) {
		select {
		case k.notes <- n:
		default: // a follower rereads on its tick anyway
		}
	})
	if err != nil {
		return nil, fmt.Errorf("no daemon answers on %s (`mevedel-exec daemon` starts one): %w", sock, err)
	}
	var info rpc.InitializeResult
	if err := k.call(rpc.MethodInitialize, rpc.InitializeParams{ClientName: "mevedel-exec cli", ProtocolVersion: rpc.ProtocolVersion}, &info); err != nil {
		k.c.Close()
		return nil, err
	}
	var st rpc.DaemonStatusResult
	if err := k.call(rpc.MethodDaemonStatus, nil, &st); err != nil {
		k.c.Close()
		return nil, err
	}
	k.sessions = st.Sessions
	return k, nil
}

func (k *cliConn) call(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	return k.c.Call(ctx, method, params, result)
}

// open attaches to session sid as an observer.
func (k *cliConn) open(s rpc.DaemonSession) error {
	if k.opened[s.SessionID] {
		return nil
	}
	if err := k.call(rpc.MethodSessionOpen, rpc.SessionOpenParams{SessionID: s.SessionID, StateDir: s.StateDir, Role: rpc.RoleObserver}, nil); err != nil {
		return fmt.Errorf("session %s: %w", s.SessionID, err)
	}
	k.opened[s.SessionID] = true
	return nil
}

func (k *cliConn) list(s rpc.DaemonSession, all bool) ([]execution.Facts, error) {
	if err := k.open(s); err != nil {
		return nil, err
	}
	var res rpc.ExecListResult
	err := k.call(rpc.MethodExecList, rpc.ExecListParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, All: all}, &res)
	return res.Executions, err
}

// find returns the session holding execution id and its facts.
func (k *cliConn) find(id string) (rpc.DaemonSession, execution.Facts, error) {
	prefix := statedir.PrefixOf(id)
	ordered := make([]rpc.DaemonSession, 0, len(k.sessions))
	for _, s := range k.sessions { // the session its id names first
		if s.IDPrefix == prefix {
			ordered = append([]rpc.DaemonSession{s}, ordered...)
		} else {
			ordered = append(ordered, s)
		}
	}
	for _, s := range ordered {
		facts, err := k.list(s, true)
		if err != nil {
			return s, execution.Facts{}, err
		}
		for _, f := range facts {
			if f.ExecutionID == id {
				return s, f, nil
			}
		}
	}
	return rpc.DaemonSession{}, execution.Facts{}, fmt.Errorf("no execution %s in the daemon (one that ended more than a minute ago is no longer held; its log stays in its session's state directory)", id)
}

// facts returns the current facts of id in s, and false once the session
// no longer holds it.
func (k *cliConn) facts(s rpc.DaemonSession, id string) (execution.Facts, bool, error) {
	facts, err := k.list(s, true)
	if err != nil {
		return execution.Facts{}, false, err
	}
	for _, f := range facts {
		if f.ExecutionID == id {
			return f, true, nil
		}
	}
	return execution.Facts{}, false, nil
}

// next waits for a notification about id, up to followTick; it returns
// the facts it carries when it settles the execution.
func (k *cliConn) next(id string) (final *execution.Facts) {
	t := time.NewTimer(followTick)
	defer t.Stop()
	for {
		select {
		case n := <-k.notes:
			switch n.Method {
			case rpc.NotifySettled:
				var p rpc.SettledParams
				if json.Unmarshal(n.Params, &p) == nil && p.Facts.ExecutionID == id {
					return &p.Facts
				}
			case rpc.NotifyChanged:
				var p rpc.ChangedParams
				if json.Unmarshal(n.Params, &p) == nil {
					for i := range p.Changed {
						if f := p.Changed[i]; f.ExecutionID == id {
							if f.State == execution.Settled {
								return &f
							}
							return nil
						}
					}
					// Growth of id says only that there is more to read.
					for _, g := range p.Grown {
						if g.ExecutionID == id {
							return nil
						}
					}
				}
			}
		case <-t.C:
			return nil
		}
	}
}

func cli(name string, args []string) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, cliUsage) }
	asJSON := fs.Bool("json", false, "print JSON, for scripts")
	all := fs.Bool("all", false, "ps: also the executions that ended and are still held")
	follow := fs.Bool("f", false, "logs: follow the output until the execution settles")
	tail := fs.Int64("tail", 0, "logs: start with the last N lines")
	session := fs.String("session", "", "grep: only this session")
	detachKey := fs.String("detach-key", `^\`, "attach: the key that detaches (^X form)")
	// Flags may follow the arguments: `logs ID -f`.
	var rest []string
	for a := args; ; {
		if err := fs.Parse(a); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		a = fs.Args()[1:]
	}
	k, err := dialDaemon()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec %s: %v\n", name, err)
		return 1
	}
	defer k.c.Close()
	need := func(n int) bool {
		if len(rest) < n || (name != "stop" && len(rest) > n) {
			fmt.Fprint(os.Stderr, cliUsage)
			return false
		}
		return true
	}
	var code int
	switch name {
	case "ps":
		if !need(0) {
			return 2
		}
		code, err = k.ps(*all, *asJSON)
	case "logs":
		if !need(1) {
			return 2
		}
		code, err = k.logs(rest[0], *follow, *tail)
	case "stop":
		if !need(1) {
			return 2
		}
		code, err = k.stop(rest, *asJSON)
	case "grep":
		if !need(1) {
			return 2
		}
		code, err = k.grep(rest[0], *session, *asJSON)
	case "attach":
		if !need(1) {
			return 2
		}
		code, err = k.attach(rest[0], *detachKey)
	case "wait":
		if !need(1) {
			return 2
		}
		code, err = k.wait(rest[0], *asJSON)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mevedel-exec %s: %s\n", name, describe(err))
		return 1
	}
	return code
}

// describe gives a protocol error's message without its code.
func describe(err error) string {
	var e *jsonrpc2.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (k *cliConn) ps(all, asJSON bool) (int, error) {
	var rows []execution.Facts
	for _, s := range k.sessions {
		facts, err := k.list(s, all)
		if err != nil {
			return 1, err
		}
		rows = append(rows, facts...)
	}
	if asJSON {
		if rows == nil {
			rows = []execution.Facts{}
		}
		printJSON(rows)
		return 0, nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSESSION\tOWNER\tLABEL\tSTATE\tRUNTIME\tOUTPUT\tWAIT/READY")
	for _, f := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.ExecutionID, f.SessionID, f.Owner, label(f), state(f), runtime(f), size(f.OutputBytes), waitReady(f))
	}
	return 0, w.Flush()
}

func label(f execution.Facts) string {
	l := f.Label
	if strings.TrimSpace(l) == "" {
		l = f.Command
	}
	l = strings.Join(strings.Fields(l), " ")
	if r := []rune(l); len(r) > 40 {
		l = string(r[:39]) + "…"
	}
	return l
}

func state(f execution.Facts) string {
	if f.State != execution.Settled {
		return string(f.State)
	}
	switch {
	case f.ExitCode != nil:
		return fmt.Sprintf("%s (exit %d)", f.Status, *f.ExitCode)
	case f.Signal != "":
		return fmt.Sprintf("%s (%s)", f.Status, f.Signal)
	}
	return fmt.Sprintf("%s (%s)", f.Status, f.Termination)
}

func runtime(f execution.Facts) string {
	d := time.Duration(f.WallMs) * time.Millisecond
	if f.State != execution.Settled && f.StartedAt != nil {
		d = time.Since(f.StartedAt.Time)
	}
	if f.StartedAt == nil {
		return "-"
	}
	return d.Truncate(100 * time.Millisecond).String()
}

func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func waitReady(f execution.Facts) string {
	var out []string
	if f.WaitingForInput {
		out = append(out, "waiting")
	}
	if f.Ready {
		out = append(out, "ready")
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func (k *cliConn) stop(ids []string, asJSON bool) (int, error) {
	code := 0
	var out []execution.Observation
	for _, id := range ids {
		s, _, err := k.find(id)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mevedel-exec stop: %s\n", describe(err))
			code = 1
			continue
		}
		var o execution.Observation
		if err := k.call(rpc.MethodExecStop, rpc.ExecStopParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, ExecutionID: id}, &o); err != nil {
			fmt.Fprintf(os.Stderr, "mevedel-exec stop %s: %s\n", id, describe(err))
			code = 1
			continue
		}
		out = append(out, o)
		if !asJSON {
			fmt.Printf("%s %s: %s\n", id, label(o.Facts), state(o.Facts))
		}
	}
	if asJSON {
		printJSON(out)
	}
	return code, nil
}

type grepHit struct {
	SessionID string `json:"sessionId"`
	spool.Match
}

func (k *cliConn) grep(pattern, only string, asJSON bool) (int, error) {
	var hits []grepHit
	truncated := false
	found := only == ""
	for _, s := range k.sessions {
		if only != "" && s.SessionID != only {
			continue
		}
		found = true
		if err := k.open(s); err != nil {
			return 1, err
		}
		var res spool.GrepResult
		if err := k.call(rpc.MethodSpoolGrep, rpc.SpoolGrepParams{SessionID: s.SessionID, Authority: rpc.Authority{As: "user"}, Pattern: pattern}, &res); err != nil {
			return 1, err
		}
		truncated = truncated || res.Truncated
		for _, m := range res.Matches {
			hits = append(hits, grepHit{s.SessionID, m})
		}
	}
	if !found {
		return 1, fmt.Errorf("no session %q in the daemon", only)
	}
	if asJSON {
		if hits == nil {
			hits = []grepHit{}
		}
		printJSON(hits)
	} else {
		for _, h := range hits {
			fmt.Printf("%s:%s:%d:%s\n", h.SessionID, h.Address, h.Line, h.Text)
		}
		if truncated {
			fmt.Fprintln(os.Stderr, "mevedel-exec grep: more matches than shown")
		}
	}
	if len(hits) == 0 {
		return 1, nil // as grep: nothing found
	}
	return 0, nil
}

// attachTail is how much of the terminal's past output attach shows.
const attachTail = 4 << 10
