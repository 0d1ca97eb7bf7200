package execution

import (
	"github.com/mevedel/mevedel-exec/transcript"
)

// The unknown-outcome gate. An execution on an SSH host whose transport
// was lost before its exit status arrived ends `unknown`: it may have run
// to its end, failed, or still run. Until the person has looked, a new
// execution that may change something is refused (read-only ones run), so
// the agent never builds on a step whose effect nobody knows. The gate
// survives a restart: the journal has the unknown end, and the
// acknowledgment.

// noteUnknown adds an unknown end to the gate. It is called while the
// execution's facts become final, under its lock, so that nobody sees
// the end before the gate does (unknownMu is taken last, under any
// other lock).
func (s *Session) noteUnknown(f Facts) {
	s.unknownMu.Lock()
	s.unknown = append(s.unknown, f)
	s.unknownMu.Unlock()
}

// UnknownOutcome returns the facts of the executions whose outcome is
// unknown and not acknowledged yet, oldest first.
func (s *Session) UnknownOutcome() []Facts {
	s.unknownMu.Lock()
	defer s.unknownMu.Unlock()
	return append([]Facts{}, s.unknown...)
}

// AcknowledgeUnknown records that the person has looked at every unknown
// outcome: executions that may change something start again. It returns
// how many there were.
func (s *Session) AcknowledgeUnknown() int {
	s.unknownMu.Lock()
	acked := s.unknown
	s.unknown = nil
	s.unknownMu.Unlock()
	for _, f := range acked {
		s.journal.Append(transcript.Record{Type: transcript.TypeAcknowledged, ExecutionID: f.ExecutionID, Owner: f.Owner})
	}
	return len(acked)
}

// unknownFrom finds in the journal the unknown outcomes nobody has
// acknowledged: latest is Journal.Latest, acked the executions with an
// acknowledged record.
func unknownFrom(latest []Facts, acked map[string]bool) []Facts {
	var out []Facts
	for _, f := range latest {
		if f.Termination == Unknown && !acked[f.ExecutionID] {
			out = append(out, f)
		}
	}
	return out
}
