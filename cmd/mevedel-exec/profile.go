//go:build benchprofile

package main

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
)

// Only in a helper built with -tags benchprofile (the benchmarks', when
// asked): MEVEDEL_EXEC_PROFILE=PREFIX writes PREFIX.cpu.pprof over the
// helper's life and PREFIX.allocs.pprof at its end; with
// MEVEDEL_EXEC_TRACE=1 also an execution trace, PREFIX.trace.
func init() {
	prefix := os.Getenv("MEVEDEL_EXEC_PROFILE")
	if prefix == "" {
		return
	}
	startProfile = func() func() {
		cpu, err := os.Create(filepath.Clean(prefix + ".cpu.pprof"))
		if err != nil {
			return func() {}
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return func() {}
		}
		var tr *os.File
		if os.Getenv("MEVEDEL_EXEC_TRACE") != "" {
			if tr, err = os.Create(prefix + ".trace"); err == nil {
				_ = trace.Start(tr)
			}
		}
		return func() {
			if tr != nil {
				trace.Stop()
				tr.Close()
			}
			pprof.StopCPUProfile()
			cpu.Close()
			if f, err := os.Create(prefix + ".allocs.pprof"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}
	}
}
