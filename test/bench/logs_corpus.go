package main

// The generated corpus of build logs the logs benchmark searches.

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// --- generated build logs ----------------------------------------------------

// lineCounts counts the lines a generator wrote, the rare ones by kind.
type lineCounts struct {
	lines                                   int
	undefRef, compileErr, failTest, failPkg int
}

func (c *lineCounts) add(o lineCounts) {
	c.lines += o.lines
	c.undefRef += o.undefRef
	c.compileErr += o.compileErr
	c.failTest += o.failTest
	c.failPkg += o.failPkg
}

const (
	kindCommon = iota
	kindUndefRef
	kindCompileErr
	kindFailTest
	kindFailPkg
)

var (
	genDirs  = []string{"core", "net", "http", "storage", "crypto", "parser", "util", "ui", "sched", "index"}
	genFiles = []string{"alloc", "buffer", "cache", "codec", "conn", "hash", "lexer", "main", "pool", "queue", "router", "session", "stream", "table", "token", "worker"}
	genTests = []string{"TestParse", "TestRoundTrip", "TestCacheEvict", "TestConnReuse", "TestHashStable", "TestRouterMatch", "TestQueueOrder", "TestTokenize", "TestSessionResume", "TestStreamBackpressure"}
	genPkgs  = []string{"acme/core", "acme/net", "acme/http/router", "acme/storage/btree", "acme/crypto/aead", "acme/parser", "acme/util/xsync", "acme/sched"}
	genIdent = []string{"ctx", "buf", "node", "key", "fd", "tmp", "state", "len2", "hdr", "cursor"}
	genWarns = []string{
		"unused variable '%' [-Wunused-variable]",
		"comparison of integer expressions of different signedness: 'int' and 'size_t' [-Wsign-compare]",
		"'%' may be used uninitialized in this function [-Wmaybe-uninitialized]",
		"this statement may fall through [-Wimplicit-fallthrough=]",
		"unused parameter '%' [-Wunused-parameter]",
	}
	genBase = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
)

// logGen writes deterministic build-log-like text: compiler invocations,
// warnings, test RUN/PASS lines, cache lines with hex ids, and rarely the
// errors and failures the grep patterns look for.
type logGen struct {
	r  *rand.Rand
	ms int64 // the clock, in milliseconds after genBase
}

func newLogGen(stream uint64) *logGen {
	return &logGen{r: rand.New(rand.NewPCG(corpusSeed, stream))}
}

func (g *logGen) pick(s []string) string { return s[g.r.IntN(len(s))] }

func (g *logGen) stamp(b []byte) []byte {
	g.ms += int64(g.r.IntN(25))
	b = genBase.Add(time.Duration(g.ms)*time.Millisecond).AppendFormat(b, "2006-01-02T15:04:05.000")
	return append(b, "Z "...)
}

func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*i))&0xf])
	}
	return b
}

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// appendSource appends "src/<dir>/<file>.c:<line>:<col>: ".
func (g *logGen) appendSource(b []byte) []byte {
	b = append(b, "src/"...)
	b = append(b, g.pick(genDirs)...)
	b = append(b, '/')
	b = append(b, g.pick(genFiles)...)
	b = append(b, ".c:"...)
	b = appendInt(b, 1+g.r.IntN(2400))
	b = append(b, ':')
	b = appendInt(b, 1+g.r.IntN(80))
	return append(b, ": "...)
}

// line appends one line, newline included, and says what kind it is.
func (g *logGen) line(b []byte) ([]byte, int) {
	r := g.r
	switch x := r.IntN(100000); {
	case x < 17:
		b = append(b, "/usr/bin/ld: build/"...)
		b = append(b, g.pick(genDirs)...)
		b = append(b, '/')
		b = append(b, g.pick(genFiles)...)
		b = append(b, ".o: in function `"...)
		b = append(b, g.pick(genFiles)...)
		b = append(b, "_init': error: undefined reference to `"...)
		b = append(b, g.pick(genDirs)...)
		b = append(b, '_')
		b = appendHex(b, r.Uint64(), 6)
		return append(b, "'\n"...), kindUndefRef
	case x < 27:
		b = g.appendSource(b)
		b = append(b, "error: '"...)
		b = append(b, g.pick(genIdent)...)
		return append(b, "' undeclared (first use in this function)\n"...), kindCompileErr
	case x < 40:
		b = append(b, "    --- FAIL: "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, " ("...)
		b = appendInt(b, r.IntN(5))
		b = append(b, '.')
		b = appendHex(b, uint64(r.IntN(256)), 2)
		return append(b, "s)\n"...), kindFailTest
	case x < 45:
		b = append(b, "FAIL\tgithub.com/"...)
		b = append(b, g.pick(genPkgs)...)
		b = append(b, '\t')
		b = appendInt(b, r.IntN(20))
		b = append(b, ".0"...)
		b = appendInt(b, 10+r.IntN(90))
		return append(b, "s\n"...), kindFailPkg
	}
	switch y := r.IntN(1000); {
	case y < 300:
		b = g.stamp(b)
		dir, file := g.pick(genDirs), g.pick(genFiles)
		b = append(b, "[cc] gcc -O2 -g -Wall -Wextra -Iinclude -c src/"...)
		b = append(b, dir...)
		b = append(b, '/')
		b = append(b, file...)
		b = append(b, ".c -o build/"...)
		b = append(b, dir...)
		b = append(b, '/')
		b = append(b, file...)
		b = append(b, ".o\n"...)
	case y < 380:
		b = g.appendSource(b)
		b = append(b, "warning: "...)
		w := g.pick(genWarns)
		if before, after, ok := strings.Cut(w, "%"); ok {
			b = append(b, before...)
			b = append(b, g.pick(genIdent)...)
			b = append(b, after...)
		} else {
			b = append(b, w...)
		}
		b = append(b, '\n')
	case y < 600:
		b = append(b, "=== RUN   "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, '\n')
	case y < 820:
		b = append(b, "    --- PASS: "...)
		b = append(b, g.pick(genTests)...)
		b = append(b, "/case_"...)
		b = appendInt(b, r.IntN(64))
		b = append(b, " (0."...)
		b = appendInt(b, 10+r.IntN(90))
		b = append(b, "s)\n"...)
	case y < 850:
		b = append(b, "ok  \tgithub.com/"...)
		b = append(b, g.pick(genPkgs)...)
		b = append(b, '\t')
		b = appendInt(b, r.IntN(4))
		b = append(b, '.')
		b = appendInt(b, 100+r.IntN(900))
		b = append(b, "s\n"...)
	case y < 950:
		b = g.stamp(b)
		b = append(b, "INFO  [worker-"...)
		b = appendInt(b, r.IntN(8))
		if r.IntN(4) == 0 {
			b = append(b, "] cache miss action="...)
		} else {
			b = append(b, "] cache hit action="...)
		}
		b = appendHex(b, r.Uint64(), 16)
		b = append(b, " output="...)
		b = appendHex(b, r.Uint64(), 16)
		b = appendHex(b, r.Uint64(), 16)
		b = appendHex(b, r.Uint64(), 8)
		b = append(b, '\n')
	default:
		b = g.stamp(b)
		b = append(b, "[ld] linking build/bin/"...)
		b = append(b, g.pick(genFiles)...)
		b = append(b, " ("...)
		b = appendInt(b, 10+r.IntN(300))
		b = append(b, " objects, "...)
		b = appendInt(b, 100+r.IntN(9000))
		b = append(b, " KiB)\n"...)
	}
	return b, kindCommon
}

// fill returns exactly size bytes of whole lines: the last line is a filler
// that matches no pattern.
func (g *logGen) fill(size int) ([]byte, lineCounts) {
	buf := make([]byte, 0, size+1024)
	var c lineCounts
	for {
		n := len(buf)
		next, kind := g.line(buf)
		if len(next) > size {
			buf = next[:n]
			break
		}
		buf = next
		c.lines++
		switch kind {
		case kindUndefRef:
			c.undefRef++
		case kindCompileErr:
			c.compileErr++
		case kindFailTest:
			c.failTest++
		case kindFailPkg:
			c.failPkg++
		}
	}
	if pad := size - len(buf); pad > 0 {
		buf = append(buf, '#')
		buf = append(buf, bytes.Repeat([]byte{'-'}, pad-1)...)
		buf[len(buf)-1] = '\n'
		c.lines++
	}
	return buf, c
}

// writePrivate creates path (mode 0600, which must not exist) holding b.
func writePrivate(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeStateDir makes stateDir and its executions directory, mode 0700.
func makeStateDir(stateDir string) (string, error) {
	execDir := filepath.Join(stateDir, "executions")
	for _, d := range []string{stateDir, execDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return "", err
		}
	}
	return execDir, nil
}
