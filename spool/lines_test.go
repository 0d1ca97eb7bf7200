package spool

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// giantLine returns a line of at least n bytes of one-, two- and
// three-byte characters, with "needle" straddling byte MaxLineBytes (where
// the first piece of the line ends), "€" starting at byte 2*MaxLineBytes,
// where a piece starts, and another one across byte 4*MaxLineBytes.
func giantLine(n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		if b.Len() > MaxLineBytes-40 && b.Len() < MaxLineBytes-30 {
			b.WriteString(strings.Repeat("x", MaxLineBytes-3-b.Len()))
			b.WriteString("needle")
			// Five bytes more put a unit's "€" at 2*MaxLineBytes.
			b.WriteString("yyyyy")
		}
		b.WriteString("é€x")
	}
	return b.Bytes()
}

// withForms runs f on a log holding data, raw and then retired.
func withForms(t *testing.T, data []byte, f func(t *testing.T, d *Dir, name string)) {
	for _, form := range []Form{FormRaw, FormGzip} {
		t.Run(string(form), func(t *testing.T) {
			d := newDir(t)
			name := putLog(t, d, "exec-g-000001", data)
			if form == FormGzip {
				mustRetire(t, d, name, RetireOptions{MemberBytes: 300_000})
			}
			f(t, d, name)
		})
	}
}

// TestGiantLinePieces: Lines hands a giant line over in pieces that split
// no character and together are the line.
func TestGiantLinePieces(t *testing.T) {
	t.Parallel()
	line := giantLine(4*MaxLineBytes + 12345)
	data := append(append([]byte("a\n"), line...), "\nb\n"...)
	withForms(t, data, func(t *testing.T, d *Dir, name string) {
		v, err := d.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		var got []byte
		pieces := 0
		err = v.Lines(func(no int64, text []byte) bool {
			if no == 2 {
				pieces++
				if len(text) > MaxLineBytes || !utf8.Valid(text) {
					t.Fatalf("piece %d: %d bytes, valid UTF-8 %v", pieces, len(text), utf8.Valid(text))
				}
				got = append(got, text...)
			}
			return true
		})
		if err != nil || !bytes.Equal(got, line) || pieces != 5 {
			t.Fatalf("%d pieces, %d bytes (want the %d of the line), %v", pieces, len(got), len(line), err)
		}
	})
}

// TestGiantLineReadContinues: reading a giant line by lines gives its
// head, cut after a whole character and marked so, and offset+length is
// exactly where the rest starts; reading on from there with byte ranges
// gives the whole line, then the next line by number.
func TestGiantLineReadContinues(t *testing.T) {
	t.Parallel()
	line := giantLine(2*MaxReadBytes + 777)
	data := append(append([]byte("a\n"), line...), "\nb\n"...)
	withForms(t, data, func(t *testing.T, d *Dir, name string) {
		r, err := d.ReadLines(name, 1, 2)
		if err != nil || r.Text != "a\n" || r.Offset != 0 || r.Length != 2 || r.Cut {
			t.Fatalf("lines 1-2 = %q at %d+%d cut %v, %v; want line 1 alone", r.Text[:min(len(r.Text), 20)], r.Offset, r.Length, r.Cut, err)
		}
		r, err = d.ReadLines(name, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Cut || r.Offset != 2 || r.Length != int64(len(r.Text)) || r.Length > MaxReadBytes || r.Length < MaxReadBytes-3 || !utf8.ValidString(r.Text) {
			t.Fatalf("line 2: offset %d length %d (text %d bytes, valid %v) cut %v", r.Offset, r.Length, len(r.Text), utf8.ValidString(r.Text), r.Cut)
		}
		if r.Text != string(data[r.Offset:r.Offset+r.Length]) {
			t.Fatal("line 2: the text is not the bytes it says it covers")
		}
		got := r.Text
		for next := r.Offset + r.Length; !strings.Contains(got, "\n"); {
			b, err := d.Read(name, next, 0)
			if err != nil || b.Offset != next || !utf8.ValidString(b.Text) {
				t.Fatalf("byte read at %d: %+v, %v", next, b.Length, err)
			}
			got += b.Text
			next = b.Offset + b.Length
		}
		if want := string(line) + "\n"; !strings.HasPrefix(got, want) {
			t.Fatalf("reading on gave %d bytes that differ from the line's %d", len(got), len(want))
		}
		r, err = d.ReadLines(name, 3, 0)
		if err != nil || r.Text != "b\n" || r.Offset != int64(len(data)-2) || !r.EOF || r.Cut {
			t.Fatalf("line 3 = %+v, %v", r, err)
		}
	})
}

// TestLineOfExactlyOneReadAndNewline: a first line of exactly
// MaxReadBytes gives all its bytes, and offset+length lands on its
// newline, not past it.
func TestLineOfExactlyOneReadAndNewline(t *testing.T) {
	t.Parallel()
	line := bytes.Repeat([]byte("y"), MaxReadBytes)
	data := append(append([]byte("a\n"), line...), "\nz\n"...)
	withForms(t, data, func(t *testing.T, d *Dir, name string) {
		r, err := d.ReadLines(name, 2, 2)
		if err != nil || r.Text != string(line) || r.Offset != 2 || r.Length != MaxReadBytes || !r.Cut {
			t.Fatalf("line 2: offset %d length %d cut %v, %v", r.Offset, r.Length, r.Cut, err)
		}
		r, err = d.ReadLines(name, 1, 3)
		if err != nil || r.Text != "a\n" {
			t.Fatalf("lines 1-3 = %d bytes, %v; want line 1 alone", len(r.Text), err)
		}
	})
}
