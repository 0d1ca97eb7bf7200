package process

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/mevedel/mevedel-exec/internal/statedir"
	"golang.org/x/sys/unix"
)

// Tree is what the helper knows of one execution's processes. Membership
// does not depend on a process's environment: a process belongs to the
// tree when it is in the execution's process group, when it is a process
// recorded in the tree (pid and start time) and still the same process,
// or when it descends by parent links from one of those. Records are kept
// from every scan (every probe and signal) and from the reaper, which
// records the orphans it adopts in the tree they came from; so a process
// whose parent died, re-parented away from its ancestors, is still known.
// The tag variable in the environment is one more way in, for what was
// seen by neither.
//
// A cgroup per execution would be an authority that needs no scan at all;
// it would take the place of scan's roots here.
type Tree struct {
	pgid      int    // immutable; 0 when there is no group to trust
	tag       string // immutable; KEY=value, or ""
	notBefore uint64 // immutable; only processes started since can carry the tag

	mu    sync.Mutex
	known map[int]uint64 // guarded by mu; pid -> start time of members seen
}

// NewTree returns the tree of the execution whose group is pgid and whose
// processes carry tag, started no earlier than notBefore (clock ticks since
// boot).
func NewTree(pgid int, tag string, notBefore uint64) *Tree {
	return &Tree{pgid: pgid, tag: tag, notBefore: notBefore, known: map[int]uint64{}}
}

// record notes p as a member.
func (t *Tree) record(p Info) {
	t.mu.Lock()
	t.known[p.Pid] = p.Start
	t.mu.Unlock()
}

// claims reports whether p is in the group or recorded.
func (t *Tree) claims(p Info) bool {
	if t.pgid > 0 && p.Pgrp == t.pgid {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.known[p.Pid]
	return ok && s == p.Start
}

// Members returns the live processes of the tree (zombies do not count)
// and records them.
func (t *Tree) Members() []Info {
	t.mu.Lock()
	known := make(map[int]uint64, len(t.known))
	for pid, s := range t.known {
		known[pid] = s
	}
	t.mu.Unlock()

	self := os.Getpid()
	table := sharedTable()
	children := make(map[int][]int, len(table))
	byPid := make(map[int]Info, len(table))
	var roots []int
	for _, p := range table {
		byPid[p.Pid] = p
		children[p.PPid] = append(children[p.PPid], p.Pid)
		if p.Pid == self {
			continue
		}
		if s, ok := known[p.Pid]; (ok && s == p.Start) || (t.pgid > 0 && p.Pgrp == t.pgid) {
			roots = append(roots, p.Pid)
		}
	}
	in := make(map[int]bool)
	descend := func(roots []int) {
		for len(roots) > 0 {
			pid := roots[len(roots)-1]
			roots = roots[:len(roots)-1]
			if in[pid] || pid == self {
				continue
			}
			in[pid] = true
			roots = append(roots, children[pid]...)
		}
	}
	descend(roots)
	if t.tag != "" {
		// Only what neither the group nor a record reached is read.
		roots = roots[:0]
		for _, p := range table {
			if !in[p.Pid] && p.Pid != self && p.Alive() && p.Start >= t.notBefore && tagOf(p) == t.tag {
				roots = append(roots, p.Pid)
			}
		}
		descend(roots)
	}
	var out []Info
	for pid := range in {
		if p := byPid[pid]; p.Alive() {
			out = append(out, p)
		}
	}

	// Keep what was seen now and what the reaper recorded meanwhile; drop
	// what is gone.
	t.mu.Lock()
	for pid, s := range t.known {
		if ks, ok := known[pid]; ok && ks == s {
			delete(t.known, pid)
		}
	}
	for _, p := range out {
		t.known[p.Pid] = p.Start
	}
	t.mu.Unlock()
	return out
}

// Members returns the live processes that belong to the execution whose
// group is pgid and whose processes carry tag (see Tree), found by one
// scan without earlier records: what recovery can still prove.
func Members(pgid int, tag string, notBefore uint64) []Info {
	return NewTree(pgid, tag, notBefore).Members()
}

// Bounds of the re-reads of an empty environment.
const (
	emptyEnvTries = 5
	emptyEnvPause = 200 * time.Microsecond
)

// tags caches the tag entry (KEY=value, or "" for none) each process
// started with, by pid and start time: an environment is read once per
// process, not once per execution that scans. A process whose environment
// was replaced later (execve) keeps the tag it was seen with, which is
// right: it is still the process that carried it.
var tags struct {
	mu   sync.Mutex
	seen map[procID]string // guarded by mu
	buf  []byte            // guarded by mu
}

type procID struct {
	pid   int
	start uint64
}

// tagOf returns the tag entry in p's environment, or "".
func tagOf(p Info) string {
	tags.mu.Lock()
	defer tags.mu.Unlock()
	id := procID{p.Pid, p.Start}
	if t, ok := tags.seen[id]; ok {
		return t
	}
	b, ok := readEnvironSettled(p.Pid, &tags.buf)
	t := ""
	if ok && len(b) > 0 {
		t = entryWithKey(b, statedir.TagVar+"=")
	}
	if cap(tags.buf) > environBuf {
		// One process's huge environment (any on the machine may be
		// read) must not stay held by the helper for its whole life.
		tags.buf = nil
	}
	if !ok || len(b) == 0 {
		return "" // unknown yet: read again next time
	}
	if tags.seen == nil {
		tags.seen = make(map[procID]string)
	}
	tags.seen[id] = t
	return t
}

// forgetTags drops the cached tags of processes no longer in table.
func forgetTags(table []Info) {
	live := make(map[procID]bool, len(table))
	for _, p := range table {
		live[procID{p.Pid, p.Start}] = true
	}
	tags.mu.Lock()
	for id := range tags.seen {
		if !live[id] {
			delete(tags.seen, id)
		}
	}
	tags.mu.Unlock()
}

// readEnvironSettled reads the initial environment of pid, all of it (a
// tag may sit past the first 256 KiB). A process in the middle of execve
// shows an empty environment until the kernel has set its bounds; an
// empty one is read again a few times before it counts as empty.
func readEnvironSettled(pid int, buf *[]byte) ([]byte, bool) {
	for try := 0; ; try++ {
		b, ok := readEnviron(pid, buf)
		if !ok || len(b) > 0 || try == emptyEnvTries {
			return b, ok
		}
		time.Sleep(emptyEnvPause)
	}
}

// entryWithKey returns the first entry of a NUL-separated environment
// that starts with key (KEY=), or "".
func entryWithKey(b []byte, key string) string {
	k := []byte(key)
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if bytes.HasPrefix(b[:i], k) {
			return string(b[:i])
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return ""
}

// scans lets concurrent scans share one read of /proc: a caller joins a
// scan that has not begun yet, whose table is therefore no older than its
// call.
var scans struct {
	mu   sync.Mutex
	next *scan      // guarded by mu; the scan callers join, not begun
	run  sync.Mutex // held while a scan reads /proc
}

type scan struct {
	done  chan struct{}
	table []Info // set before done is closed
}

func sharedTable() []Info {
	scans.mu.Lock()
	if s := scans.next; s != nil {
		scans.mu.Unlock()
		<-s.done
		return s.table
	}
	s := &scan{done: make(chan struct{})}
	scans.next = s
	scans.mu.Unlock()
	scans.run.Lock()
	scans.mu.Lock()
	scans.next = nil // callers from now on need a later scan
	scans.mu.Unlock()
	s.table = Table()
	forgetTags(s.table)
	scans.run.Unlock()
	close(s.done)
	return s.table
}

// environBuf is the size of the buffer environments are read into; most
// fit, a larger one grows it for that read only.
const environBuf = 64 << 10

// readEnviron reads all of /proc/PID/environ into *buf, growing it.
func readEnviron(pid int, buf *[]byte) ([]byte, bool) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/environ", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	if *buf == nil {
		*buf = make([]byte, environBuf)
	}
	n := 0
	for {
		if n == len(*buf) {
			*buf = append(*buf, make([]byte, len(*buf))...)
		}
		m, err := unix.Read(fd, (*buf)[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if m == 0 {
			return (*buf)[:n], true
		}
		n += m
	}
}

// comm is pid's command name, for a log line.
func comm(pid int) string {
	var buf [64]byte
	b, _ := readProcFile("/proc/"+strconv.Itoa(pid)+"/comm", buf[:])
	return string(bytes.TrimSpace(b))
}
