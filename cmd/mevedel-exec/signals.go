package main

import (
	"log"
	"os"
	"os/signal"
	goruntime "runtime"
	"time"

	"github.com/mevedel/mevedel-exec/execution"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/process"
	"github.com/mevedel/mevedel-exec/rpc"
	"golang.org/x/sys/unix"
)

// forcedWait bounds the wait, after the SIGKILL sweep of a second signal,
// for the executions to settle and the journals to be written, before the
// helper exits anyway.
const forcedWait = time.Second

// onSignals makes the first SIGTERM, SIGINT or SIGHUP a shutdown, exactly
// as the shutdown request makes one, after which the helper exits. A
// second one before that shutdown has finished kills every process of
// every execution and ends the helper at once.
func onSignals(srv *rpc.Server, signals <-chan os.Signal, logger *log.Logger) {
	sig := <-signals
	logger.Printf("%v: shutting down (a second signal ends the helper at once)", sig)
	srv.Stop()
	select {
	case <-srv.Done():
		return
	case sig = <-signals:
	}
	n := sweep(srv.Live())
	logger.Printf("%v during the shutdown: sent SIGKILL to %d processes of the live executions; exiting", sig, n)
	t := time.NewTimer(forcedWait)
	defer t.Stop()
	select {
	case <-srv.Done():
	case <-t.C:
		// What started meanwhile is killed too, and the helper goes
		// without waiting for the rest.
		sweep(srv.Live())
		srv.Abort()
	}
}

// sweep sends SIGKILL to every process of the live executions on this
// machine (their groups, what carries their tag, and the descendants of
// both) and to every descendant of the helper (as subreaper it adopted the
// orphans; this also ends a login-environment capture). It returns how
// many were signalled. Executions on SSH hosts are left to their hosts:
// the next open of their session reclaims them.
func sweep(live []execution.Facts) int {
	self := os.Getpid()
	kill := map[int]bool{}
	for _, f := range live {
		if f.Target != "" && f.Target != "local" {
			continue
		}
		pgid := f.Pgid
		if pgid > 0 {
			_ = unix.Kill(-pgid, unix.SIGKILL)
		}
		for _, p := range process.Members(max(pgid, 0), statedir.Tag(f.ExecutionID), 0) {
			kill[p.Pid] = true
		}
	}
	children := map[int][]int{}
	for _, p := range process.Table() {
		if p.Alive() {
			children[p.PPid] = append(children[p.PPid], p.Pid)
		}
	}
	for stack := children[self]; len(stack) > 0; {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !kill[pid] {
			kill[pid] = true
			stack = append(stack, children[pid]...)
		}
	}
	delete(kill, self)
	n := 0
	for pid := range kill {
		if unix.Kill(pid, unix.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// Stack dump markers, around what dumpStacksOn writes to stderr.
const (
	stacksBegin = "goroutine stacks begin"
	stacksEnd   = "goroutine stacks end"
)

// dumpStacksOn writes every goroutine's stack to the log each time sig
// arrives, and goes on serving: a helper that seems stuck can say where
// without being killed (SIGQUIT would end it and orphan its commands).
func dumpStacksOn(sig os.Signal, logger *log.Logger) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sig)
	for range c {
		buf := make([]byte, 1<<20)
		for {
			n := goruntime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		logger.Printf("%v: %s\n%s\n%s", sig, stacksBegin, buf, stacksEnd)
	}
}
