package execution

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/internal/statedir"
	"github.com/mevedel/mevedel-exec/spool"
)

// Logs are read through the spool package's logical views, whatever their
// physical form; this file adds authority (an owner reads only its own
// executions' logs) and the read and grep views the protocol offers.

const (
	// DefaultMaxMatches bounds one spool/grep unless the caller says.
	DefaultMaxMatches = 200
	maxGrepContext    = 50
)

// visible reports whether c may read the log with logical name. A log of
// an execution started before this open of the session has no known owner
// and is visible to the user only.
func (s *Session) visible(c Caller, name string) bool {
	if c.User {
		return true
	}
	s.mu.Lock()
	owner, ok := s.owners[statedir.IDOf(name)]
	s.mu.Unlock()
	return ok && owner == c.owner()
}

// logName parses an address and checks that c may read it; anything else
// is "not found", like an execution of another owner.
func (s *Session) logName(c Caller, address string) (string, error) {
	name, err := s.dir.ParseAddress(address)
	if err != nil {
		if fault.KindOf(err) == fault.NotFound {
			return "", fault.New(fault.NotFound, "no log %q", address)
		}
		return "", err
	}
	if !s.visible(c, name) {
		return "", fault.New(fault.NotFound, "no log %q", address)
	}
	return name, nil
}

// LogStat answers spool/stat. LogicalBytes is absent when it cannot be
// learned cheaply: a retired log without a usable index (Unindexed).
type LogStat struct {
	Address       string `json:"address"`
	LogicalBytes  *int64 `json:"logicalBytes,omitempty"`
	Physical      string `json:"physical"`
	PhysicalBytes int64  `json:"physicalBytes"`
	Retired       bool   `json:"retired,omitempty"`
	Unindexed     bool   `json:"unindexed,omitempty"`
}

// StatLog describes one log.
func (s *Session) StatLog(c Caller, address string) (LogStat, error) {
	name, err := s.logName(c, address)
	if err != nil {
		return LogStat{}, err
	}
	st, err := s.dir.Stat(name)
	if err != nil {
		return LogStat{}, err
	}
	ls := LogStat{Address: statedir.Address(name), Physical: string(st.Form), PhysicalBytes: st.PhysicalBytes, Retired: st.Retired, Unindexed: st.Unindexed}
	if !st.SizeUnknown {
		ls.LogicalBytes = &st.Size
	}
	return ls, nil
}

// GlobLogs lists the addresses of the logs matching pattern (a logical
// glob, default executions/*.log) that c may read, sorted.
func (s *Session) GlobLogs(c Caller, pattern string) ([]string, error) {
	if pattern == "" {
		pattern = statedir.LogName("*")
	}
	names, err := s.dir.Glob(strings.TrimPrefix(pattern, statedir.Scheme))
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, n := range names {
		if s.visible(c, n) {
			out = append(out, statedir.Address(n))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadLog reads a byte range (offset, length ≤ 1 MiB) or, when line > 0, a
// range of lines (line is 1-based; lines at most 1 MiB in all) of a log c
// may read.
func (s *Session) ReadLog(c Caller, address string, offset, length, line, lines int64) (spool.ReadResult, error) {
	name, err := s.logName(c, address)
	if err != nil {
		return spool.ReadResult{}, err
	}
	if offset < 0 || length < 0 || line < 0 || lines < 0 {
		return spool.ReadResult{}, fault.New(fault.InvalidParams, "offset, length, line and lines must not be negative")
	}
	if line > 0 {
		return s.dir.ReadLines(name, line, lines)
	}
	return s.dir.Read(name, offset, length)
}

// GrepParams select what spool/grep searches.
type GrepParams struct {
	Pattern    string   // RE2
	Glob       string   // logical glob; default executions/*.log
	Addresses  []string // instead of Glob
	MaxMatches int      // default 200
	Context    int      // lines before and after each match
}

// GrepLogs searches the logs c may read line by line with an RE2 pattern,
// in file order.
func (s *Session) GrepLogs(ctx context.Context, c Caller, p GrepParams) (spool.GrepResult, error) {
	re, err := spool.CompilePattern(p.Pattern)
	if err != nil {
		return spool.GrepResult{}, err
	}
	if p.MaxMatches <= 0 {
		p.MaxMatches = DefaultMaxMatches
	}
	if p.Context < 0 || p.Context > maxGrepContext {
		return spool.GrepResult{}, fault.New(fault.InvalidParams, "context must be between 0 and %d", maxGrepContext)
	}
	var names []string
	if len(p.Addresses) > 0 {
		for _, a := range p.Addresses {
			n, err := s.logName(c, a)
			if err != nil {
				return spool.GrepResult{}, err
			}
			names = append(names, n)
		}
	} else {
		addrs, err := s.GlobLogs(c, p.Glob)
		if err != nil {
			return spool.GrepResult{}, err
		}
		for _, a := range addrs {
			names = append(names, strings.TrimPrefix(a, statedir.Scheme))
		}
	}
	return s.dir.Grep(ctx, names, re, spool.GrepOptions{MaxMatches: p.MaxMatches, Context: p.Context, Address: statedir.Address})
}

// retireLater compresses an execution's log once nobody can poll its
// final observation any more, after the session's retireAfterMs.
func (s *Session) retireLater(e *Execution, settledAt time.Time) {
	wait := time.Until(settledAt.Add(time.Duration(s.limits.RetireAfterMs) * time.Millisecond))
	// The wait holds the log's name only: the execution, its facts and
	// final observation are free once it left the registry.
	name := statedir.LogName(e.id)
	s.Go(func() {
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.life.Done():
				return
			}
		}
		select {
		case s.retireQ <- name:
		case <-s.life.Done():
		}
	})
}

// retirer is the session's one background compressor. It and the
// goroutines it compresses with run at lower CPU priority than requests.
func (s *Session) retirer() {
	spool.LowerThreadPriority()
	for {
		select {
		case name := <-s.retireQ:
			res, err := s.dir.Retire(name, spool.RetireOptions{Background: true})
			switch {
			case err != nil:
				logf("execution: retiring %s: %v (the raw log stays)", name, err)
			case res.Retired:
				logf("execution: retired %s: %d → %d bytes", name, res.RawBytes, res.GzipBytes)
			}
		case <-s.life.Done():
			return
		}
	}
}
