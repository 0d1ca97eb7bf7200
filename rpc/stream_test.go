package rpc

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"strings"
	"testing"
)

func frame(body string) string {
	return "Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// readAll reads objects until the stream ends, returning what was decoded
// and what the stream answered by itself.
func readAll(t *testing.T, input string) ([]map[string]any, string) {
	t.Helper()
	var out bytes.Buffer
	s := NewStream(strings.NewReader(input), &out, nil, log.New(io.Discard, "", 0))
	var got []map[string]any
	for {
		var v map[string]any
		if err := s.ReadObject(&v); err != nil {
			if err != io.EOF {
				t.Fatalf("ReadObject: %v, want io.EOF at the end", err)
			}
			// Writes are queued: Close waits until they are written.
			s.Close()
			return got, out.String()
		}
		got = append(got, v)
	}
}

func TestStreamAnswersMalformedBodiesAndReadsOn(t *testing.T) {
	input := frame(`nope`) + frame(`[1]`) + frame(`{"jsonrpc":"2.0","id":1,"method":"x"}`)
	got, answered := readAll(t, input)
	if len(got) != 1 || got[0]["method"] != "x" {
		t.Fatalf("decoded %v", got)
	}
	if !strings.Contains(answered, `"code":-32700`) || !strings.Contains(answered, `"code":-32600`) || strings.Count(answered, `"id":null`) != 2 {
		t.Fatalf("answers: %s", answered)
	}
}

func TestStreamCorruptHeaderIsEOF(t *testing.T) {
	for _, input := range []string{
		"Content-Length: x\r\n\r\n{}",
		"Content-Length: 10\n\n{}",
		"Garbage\r\n\r\n",
		"\r\n",
		"Content-Length: 99999999999\r\n\r\n",
		frame(`{"jsonrpc":"2.0","id":1,"method":"x"}`)[:30],
	} {
		got, _ := readAll(t, input)
		if len(got) != 0 {
			t.Fatalf("%q decoded %v", input, got)
		}
	}
}

func FuzzStream(f *testing.F) {
	f.Add(frame(`{"jsonrpc":"2.0","id":1,"method":"x","params":{}}`))
	f.Add(frame(`{"jsonrpc":"2.0","id":"a","result":1}`))
	f.Add(frame(`{`) + frame(`{"jsonrpc":"2.0","method":"n"}`))
	f.Add("Content-Length: 2\r\nContent-Type: x\r\n\r\n{}")
	f.Fuzz(func(t *testing.T, input string) {
		var out bytes.Buffer
		s := NewStream(strings.NewReader(input), &out, nil, log.New(io.Discard, "", 0))
		defer s.Close()
		for i := 0; i < 1000; i++ {
			var v anyJSON
			if err := s.ReadObject(&v); err != nil {
				return
			}
		}
	})
}

type anyJSON map[string]any
