package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"sync"
)

// maxFrame bounds one message body. A larger Content-Length is treated as a
// corrupt header: the stream cannot be resynchronised without reading it.
const maxFrame = 64 << 20

// Stream is a jsonrpc2.ObjectStream over Content-Length frames.
//
// sourcegraph/jsonrpc2 closes the connection on any read error, a body that
// is not JSON included, and cannot send a response with a null id. Stream
// therefore reads each framed body raw and answers a malformed body itself
// (-32700 or -32600 with id null) before reading on; only a corrupt frame
// header ends the stream, reported as io.EOF.
type Stream struct {
	r      *bufio.Reader
	closer io.Closer
	logger *log.Logger

	mu sync.Mutex // serialises writes
	w  *bufio.Writer
}

// NewStream returns a Stream reading from r and writing to w. closer, when
// non-nil, is closed by Close.
func NewStream(r io.Reader, w io.Writer, closer io.Closer, logger *log.Logger) *Stream {
	return &Stream{r: bufio.NewReaderSize(r, 64<<10), w: bufio.NewWriter(w), closer: closer, logger: logger}
}

// WriteObject writes obj as one frame.
func (s *Stream) WriteObject(obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return s.writeFrame(data)
}

func (s *Stream) writeFrame(data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintf(s.w, "Content-Length: %d\r\n\r\n", len(data)); err != nil {
		return err
	}
	if _, err := s.w.Write(data); err != nil {
		return err
	}
	return s.w.Flush()
}

// ReadObject reads frames until one holds a well-formed message, which it
// decodes into v. Malformed bodies are answered and skipped.
func (s *Stream) ReadObject(v any) error {
	for {
		body, err := s.readFrame()
		if err != nil {
			if err != io.EOF {
				s.logger.Printf("rpc: %v; closing the connection", err)
			}
			return io.EOF
		}
		code, msg := checkMessage(body)
		if code == 0 {
			if err := json.Unmarshal(body, v); err == nil {
				return nil
			} else {
				code, msg = codeInvalidRequest, "invalid request: "+err.Error()
			}
		}
		if err := s.writeFrame(errorFrame(code, msg)); err != nil {
			return err
		}
	}
}

// Close closes the underlying closer.
func (s *Stream) Close() error {
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}

// readFrame reads one header block and its body. Any header defect is fatal.
func (s *Stream) readFrame() ([]byte, error) {
	length := -1
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && length < 0 {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("truncated frame header: %w", err)
		}
		if !strings.HasSuffix(line, "\r\n") {
			return nil, fmt.Errorf("frame header line not ended by CRLF: %q", line)
		}
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("malformed frame header %q", line)
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 || n > maxFrame {
				return nil, fmt.Errorf("bad Content-Length %q", value)
			}
			length = n
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("frame without Content-Length")
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(s.r, body); err != nil {
		return nil, fmt.Errorf("truncated frame body: %w", err)
	}
	return body, nil
}

const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// checkMessage returns 0 when body is one JSON-RPC request or response the
// jsonrpc2 package can decode, else the error code and message to answer.
func checkMessage(body []byte) (int64, string) {
	if !json.Valid(body) {
		return codeParseError, "parse error: the message body is not valid JSON"
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return codeInvalidRequest, "invalid request: a message must be a JSON object (batches are not supported)"
	}
	if v, ok := m["jsonrpc"]; !ok || !bytes.Equal(bytes.TrimSpace(v), []byte(`"2.0"`)) {
		return codeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`
	}
	if id, ok := m["id"]; ok && !validID(id) {
		return codeInvalidRequest, "invalid request: id must be a string or a non-negative integer"
	}
	if method, ok := m["method"]; ok {
		var name string
		if json.Unmarshal(method, &name) != nil || name == "" {
			return codeInvalidRequest, "invalid request: method must be a non-empty string"
		}
		if p, ok := m["params"]; ok {
			p = bytes.TrimSpace(p)
			if len(p) == 0 || (p[0] != '{' && p[0] != '[' && !bytes.Equal(p, []byte("null"))) {
				return codeInvalidRequest, "invalid request: params must be an object or an array"
			}
		}
		return 0, ""
	}
	_, hasResult := m["result"]
	_, hasError := m["error"]
	if hasResult || hasError {
		return 0, ""
	}
	return codeInvalidRequest, "invalid request: neither a request nor a response"
}

func validID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case 'n':
		return false // jsonrpc2 cannot answer a null id distinctly
	default:
		// jsonrpc2 reads numeric ids as int64.
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil && n >= 0
	}
}

func errorFrame(code int64, msg string) []byte {
	kind := "invalid-request"
	if code == codeParseError {
		kind = "parse"
	}
	data, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": msg, "data": map[string]string{"kind": kind}},
	})
	return data
}
