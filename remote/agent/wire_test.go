package agent

import (
	"bytes"
	"io"
	"testing"
)

// Frames of every size written every way come back whole and in order,
// output payloads in pooled buffers, including when the reader starts
// with bytes an earlier reader of the stream took.
func TestFramesRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	w := NewWriter(&stream)
	sizes := []int{0, 1, 9, smallFrame, smallFrame + 1, inlineMax, inlineMax + 1, 300 << 10, ChunkSize}
	var want []Frame
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte('a' + i)}, n)
		f := Frame{Type: MsgOutput, ID: uint32(i), Payload: p}
		switch i % 2 {
		case 0:
			if err := w.Write(f.Type, f.ID, p); err != nil {
				t.Fatal(err)
			}
		case 1:
			r := Frame{Type: MsgReply, ID: 1000 + uint32(i), Payload: []byte(`{}`)}
			if err := w.WriteAll(f, r); err != nil {
				t.Fatal(err)
			}
			want = append(want, f)
			f = r
		}
		want = append(want, f)
	}
	all := stream.Bytes()
	for _, split := range []int{0, 5, 20, len(all) / 2} {
		r := NewReader(all[:split], bytes.NewReader(all[split:]))
		for i, f := range want {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("split %d, frame %d: %v", split, i, err)
			}
			if got.Type != f.Type || got.ID != f.ID || !bytes.Equal(got.Payload, f.Payload) {
				t.Fatalf("split %d, frame %d: got %q %d (%d bytes), want %q %d (%d bytes)", split, i, got.Type, got.ID, len(got.Payload), f.Type, f.ID, len(f.Payload))
			}
			if got.Type == MsgOutput {
				Release(got.Payload)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("split %d: after the last frame: %v", split, err)
		}
	}
}

// A truncated frame is an error, not a short payload.
func TestTruncatedFrame(t *testing.T) {
	var stream bytes.Buffer
	if err := NewWriter(&stream).Write(MsgOutput, 1, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	r := NewReader(nil, bytes.NewReader(stream.Bytes()[:50<<10]))
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated frame: %v", err)
	}
}
