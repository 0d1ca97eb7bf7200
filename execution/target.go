package execution

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mevedel/mevedel-exec/internal/fault"
	"github.com/mevedel/mevedel-exec/remote"
	"github.com/mevedel/mevedel-exec/remote/agent"
)

// A session's target: the machine, host or container its agent works
// in, named at session/open (a TRAMP name, or nothing for this
// machine). The open describes it: where it is, its incarnation, what it
// lacks; or, when it cannot be reached within describeTimeout, why, and
// the open succeeds all the same (a start there will say it again). The
// incarnation is recorded in the state directory; the next open that
// finds another one reports it once, as replaced, unless recovery
// already settled the executions that were live there as
// target-replaced.

// describeTimeout bounds the connection to a remote target and its probe
// at session/open (an agent's first deployment that takes longer goes on
// in the background).
const describeTimeout = 15 * time.Second

// targetFile is the record of the target's incarnation, in the state
// directory.
const targetFile = "target.json"

// TargetInfo describes a session's target.
type TargetInfo struct {
	// Name is "local", or the target as the facts' target names it.
	Name         string `json:"name"`
	TargetMethod string `json:"targetMethod,omitempty"`
	SupportTier  string `json:"supportTier"`
	// RemoteMode is how a remote target runs commands: agent or wrapper.
	RemoteMode  string              `json:"remoteMode,omitempty"`
	Incarnation *remote.Incarnation `json:"incarnation,omitempty"`
	// Lacks lists the probed programs (remote.ProbedPrograms) not found there;
	// Missing those of them every start there needs: starts are refused.
	Lacks   []string `json:"lacks"`
	Missing []string `json:"missing,omitempty"`
	// Replaced is set by the first open that finds the target in
	// another incarnation than the state directory recorded.
	Replaced *TargetReplaced `json:"replaced,omitempty"`
	// Error says why the target could not be described (not reached).
	Error string `json:"error,omitempty"`
}

// TargetReplaced is the incarnation the state directory recorded.
type TargetReplaced struct {
	Previous remote.Incarnation `json:"previous"`
}

// targetRecord is targetFile's content.
type targetRecord struct {
	Name        string             `json:"name"`
	Incarnation remote.Incarnation `json:"incarnation"`
}

// CheckTarget validates session/open's target: empty, a local path, or a
// TRAMP name exec/start takes.
func CheckTarget(name string) error {
	if _, _, err := remote.ParseTRAMP(name); err != nil {
		return fault.New(fault.InvalidParams, "target: %w", err)
	}
	return nil
}

// Target is the description of the session's target as its open made it
// (without Replaced, which only that open reports); nil before.
func (s *Session) Target() *TargetInfo {
	return s.target.Load()
}

// DescribeTarget describes the session's target (name as session/open
// gives it) and records its incarnation; recovered are the executions
// recovery settled at this open.
func (s *Session) DescribeTarget(ctx context.Context, name string, recovered []Facts) TargetInfo {
	ti := s.m.describe(ctx, name)
	if ti.Incarnation != nil && ti.Incarnation.Key() != "" {
		file := filepath.Join(s.stateDir.Root, targetFile)
		var prev targetRecord
		b, err := os.ReadFile(file)
		if err == nil && json.Unmarshal(b, &prev) == nil && prev.Name == ti.Name &&
			prev.Incarnation.Key() != "" && prev.Incarnation.Key() != ti.Incarnation.Key() &&
			!slices.ContainsFunc(recovered, func(f Facts) bool { return f.Reason == ReasonTargetReplaced }) {
			ti.Replaced = &TargetReplaced{Previous: prev.Incarnation}
		}
		rec := targetRecord{Name: ti.Name, Incarnation: *ti.Incarnation}
		if err != nil || prev != rec {
			if err := writeDurably(file, rec); err != nil {
				logf("session %s: recording the target's incarnation: %v", s.id, err)
			}
		}
		s.recMu.Lock()
		s.recorded = &rec
		s.recMu.Unlock()
	}
	kept := ti
	kept.Replaced = nil
	s.target.Store(&kept)
	return ti
}

// replacementSettled notes that an execution on target settled lost as
// target-replaced while the session was open: that was the report of
// the replacement, so the state directory's record of the session's
// target forgets the incarnation it held, and the next open, finding
// the new one, does not report it again.
func (s *Session) replacementSettled(target string) {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if s.recorded == nil || s.recorded.Name != target || s.recorded.Incarnation == (remote.Incarnation{}) {
		return
	}
	rec := targetRecord{Name: target}
	if err := writeDurably(filepath.Join(s.stateDir.Root, targetFile), rec); err != nil {
		logf("session %s: recording the target's replacement: %v", s.id, err)
		return
	}
	s.recorded = &rec
}

// describe probes the target name gives.
func (m *Manager) describe(ctx context.Context, name string) TargetInfo {
	t, isRemote, err := remote.ParseTRAMP(name)
	if err != nil || !isRemote {
		inc := agent.ReadIncarnation()
		lacks := agent.Lacking(remote.ProbedPrograms)
		ti := TargetInfo{Name: "local", SupportTier: remote.TierSupported, Lacks: nonNil(lacks),
			Incarnation: &remote.Incarnation{Hostname: inc.Hostname, BootID: inc.BootID}}
		if slices.Contains(lacks, "bash") {
			ti.Missing = []string{"bash"}
		}
		return ti
	}
	ti := TargetInfo{Name: where(t), TargetMethod: t.MethodName(), SupportTier: t.Tier(), Lacks: []string{}}
	pool := m.remotePool()
	if pool == nil {
		ti.Error = "the helper is shutting down"
		return ti
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	resolved, err := pool.Connect(ctx, t)
	if err == nil {
		ti.Name = where(resolved)
		var rd remote.Readiness
		if rd, err = pool.Probe(ctx, t); err == nil {
			inc := rd.Incarnation
			ti.RemoteMode, ti.Incarnation, ti.Lacks, ti.Missing = rd.Mode, &inc, nonNil(rd.Lacks), rd.Missing
			return ti
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		ti.Error = "the target did not answer within " + describeTimeout.String()
	} else {
		ti.Error = err.Error()
	}
	return ti
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeDurably writes v as JSON to file (0600) through a temporary file
// that is synced and renamed over it, the directory synced after.
func writeDurably(file string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(file))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
