//go:build benchprofile

package main

import (
	"os"
	"path/filepath"
	"runtime/pprof"
)

// Only in a helper built with -tags benchprofile (the benchmarks', when
// asked): MEVEDEL_EXEC_PROFILE=PREFIX writes PREFIX.cpu.pprof over the
// helper's life and PREFIX.allocs.pprof at its end.
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
		return func() {
			pprof.StopCPUProfile()
			cpu.Close()
			if f, err := os.Create(prefix + ".allocs.pprof"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}
	}
}
