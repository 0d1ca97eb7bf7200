package rpc

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"strings"
	"testing"
)

func TestCountValues(t *testing.T) {
	for _, tc := range []struct {
		json string
		n    int
	}{
		{`{}`, 0},
		{`[]`, 0},
		{`{"a":1}`, 1},
		{`{"a":[1,2],"b":{"c":[]}}`, 5},
		{`[[],[[]],{"x":"a,b]\"[,"}]`, 5},
		{`["\\", ",", "\\\"", 3]`, 4},
	} {
		if n := countValues([]byte(tc.json), MaxValues); n != tc.n {
			t.Errorf("%s: %d values, want %d", tc.json, n, tc.n)
		}
	}
	// It stops past the limit.
	many := []byte("[" + strings.Repeat("0,", 1000) + "0]")
	if n := countValues(many, 10); n != 11 {
		t.Errorf("stopped at %d, want 11", n)
	}
}

func TestStreamFrameLimits(t *testing.T) {
	ok := frame(`{"jsonrpc":"2.0","id":1,"method":"x"}`)
	for name, tc := range map[string]struct {
		input   string
		decoded int
		answer  string
	}{
		"header line at the bound": {"X: " + strings.Repeat("a", MaxHeaderLine-5) + "\r\n" + ok, 1, ""},
		"header line over it":      {"X: " + strings.Repeat("a", MaxHeaderLine-4) + "\r\n" + ok, 0, ""},
		"header block over it":     {strings.Repeat("X: y\r\n", MaxHeaderBlock/6) + ok, 0, ""},
		"body over the limit":      {"Content-Length: " + itoa(MaxFrame+1) + "\r\n\r\n" + strings.Repeat(" ", MaxFrame+1) + ok, 1, "over the limit of 67108864 bytes"},
		"too many values":          {frame(`{"jsonrpc":"2.0","id":2,"method":"x","params":[`+strings.Repeat("0,", MaxValues)+`0]}`) + ok, 1, "at most 65536"},
		"long method":              {frame(`{"jsonrpc":"2.0","id":2,"method":"`+strings.Repeat("m", maxEnvelopeString+1)+`"}`) + ok, 1, "method is 4097 bytes"},
		"long id":                  {frame(`{"jsonrpc":"2.0","id":"`+strings.Repeat("i", maxEnvelopeString+1)+`","method":"x"}`) + ok, 1, "a string id is at most 4096 bytes"},
	} {
		got, answered := readAll(t, tc.input)
		if len(got) != tc.decoded {
			t.Errorf("%s: decoded %d messages, want %d", name, len(got), tc.decoded)
		}
		if tc.answer != "" && (!strings.Contains(answered, tc.answer) || !strings.Contains(answered, `"id":null`) || !strings.Contains(answered, `"code":-32600`)) {
			t.Errorf("%s: answered %.200s", name, answered)
		}
	}
}

// Params reach the request only through AttachParams: jsonrpc2 never
// decodes them.
func TestStreamKeepsParamsAside(t *testing.T) {
	var out bytes.Buffer
	s := NewStream(strings.NewReader(frame(`{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[1,2]}}`)), &out, nil, log.New(io.Discard, "", 0))
	defer s.Close()
	var m map[string]json.RawMessage
	if err := s.ReadObject(&m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["params"]; ok || s.params == nil || string(*s.params) != `{"a":[1,2]}` {
		t.Fatalf("message %s, params aside %v", m, s.params)
	}
}
