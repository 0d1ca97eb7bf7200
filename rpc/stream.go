package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// Framing limits (docs/protocol.md, "Framing" and "Limits").
const (
	// MaxFrame bounds one message body. A larger Content-Length is
	// answered and its body skipped without being kept.
	MaxFrame = 64 << 20
	// MaxHeaderLine bounds one header line, its CRLF included, and
	// MaxHeaderBlock the whole header block, the empty line included. Past
	// either the next frame cannot be found, so the stream ends.
	MaxHeaderLine  = 1 << 10
	MaxHeaderBlock = 8 << 10
	// MaxValues bounds the array elements and object members of one
	// message, all depths together. They are counted before the message is
	// parsed: a frame of millions of small numbers would otherwise cost
	// gigabytes to decode.
	MaxValues = 1 << 16
	// maxEnvelopeString bounds the method name and a string id: both are
	// echoed in replies and kept while a request runs.
	maxEnvelopeString = MaxStringBytes
)

// Output limits: what waits for a client that does not read.
const (
	// outboxBytes is how much output may wait for the client; a writer
	// that would go past it waits for room (a single larger frame waits
	// for an empty outbox).
	outboxBytes = 8 << 20
	// behindBytes waiting means the client is behind: advisory
	// notifications (exec/progress) are dropped rather than queued.
	behindBytes = 1 << 20
	// writeChunk is the unit of progress the stall timer watches.
	writeChunk = 64 << 10
	// DefaultStallTimeout is how long a client may take no byte at all
	// while output waits for it before it is disconnected.
	DefaultStallTimeout = 60 * time.Second
)

var (
	errStalled      = errors.New("the client read nothing for the stall timeout while output waited for it")
	errStreamClosed = errors.New("the stream is closed")
)

// Stream is a jsonrpc2.ObjectStream over Content-Length frames.
//
// sourcegraph/jsonrpc2 closes the connection on any read error, a body that
// is not JSON included, and cannot send a response with a null id. Stream
// therefore reads each framed body raw and answers a malformed body itself
// (-32700 or -32600 with id null) before reading on; only a header it
// cannot get past ends the stream, reported as io.EOF.
//
// jsonrpc2 decodes a request's params generically (every array element an
// interface value) before the handler sees them. ReadObject therefore gives
// it the message without its params and keeps them aside; AttachParams
// puts them on the request before it is handled.
//
// Writes never block on the client: frames queue in an outbox written by
// one goroutine. A writer waits only while the outbox is full, and a client
// that takes no byte for the stall timeout, or whose connection fails, is
// given up: every later write fails and onFail is called once.
type Stream struct {
	r      *bufio.Reader
	closer io.Closer
	logger *log.Logger

	params *json.RawMessage // read loop only: the params of the message just read
	held   chan struct{}    // when not nil, reading waits until it is closed
	closed atomic.Bool      // Close was called: a read error is its doing

	out *outbox
}

// hold makes reading wait until release, so the caller can record the
// connection before its first request is handled.
func (s *Stream) hold() { s.held = make(chan struct{}) }

func (s *Stream) release() { close(s.held) }

// NewStream returns a Stream reading from r and writing to w. closer, when
// non-nil, is closed by Close. Its writes never time out.
func NewStream(r io.Reader, w io.Writer, closer io.Closer, logger *log.Logger) *Stream {
	return newStream(r, w, closer, logger, 0, nil)
}

// newStream is NewStream with a stall timeout (0: none) and the function
// called, once, when writing fails or stalls.
func newStream(r io.Reader, w io.Writer, closer io.Closer, logger *log.Logger, stall time.Duration, onFail func(error)) *Stream {
	return &Stream{
		r:      bufio.NewReaderSize(r, 64<<10),
		closer: closer,
		logger: logger,
		out:    newOutbox(w, stall, onFail),
	}
}

// AttachParams is the connection option that gives each request the
// params ReadObject kept aside. It runs on the read loop, between
// ReadObject and the handler.
func (s *Stream) AttachParams() jsonrpc2.ConnOpt {
	return jsonrpc2.OnRecv(func(req *jsonrpc2.Request, resp *jsonrpc2.Response) {
		if req != nil && resp == nil {
			req.Params, s.params = s.params, nil
		}
	})
}

// WriteObject queues obj as one frame.
func (s *Stream) WriteObject(obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return s.writeFrame(data)
}

// writeResult queues the response to request id with result. jsonrpc2's
// own path encodes a result four times over (each json.Marshaler layer
// is re-validated), which for a listing of hundreds of executions was
// most of its cost: this encodes it once, into a pooled buffer.
func (s *Stream) writeResult(id jsonrpc2.ID, result any) error {
	idJSON, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return s.encodeFrame(`{"id":`+string(idJSON)+`,"result":`, result)
}

// writeNotification queues the notification method with params, encoded
// once (see writeResult).
func (s *Stream) writeNotification(method string, params any) error {
	name, err := json.Marshal(method)
	if err != nil {
		return err
	}
	return s.encodeFrame(`{"method":`+string(name)+`,"params":`, params)
}

// Frames encoded by encodeFrame are built in buffers that go back to
// frameBufs once written: a listing of 500 executions is 300 KB, and a
// fresh buffer for every one kept the collector busy enough to show in
// the listing's tail latency.
var frameBufs = sync.Pool{New: func() any { return new([]byte) }}

const (
	frameHeadRoom = 40      // "Content-Length: " + the digits + CRLF CRLF
	framePoolMax  = 4 << 20 // larger buffers are left to the collector
)

// jsonAppender is a value that writes its own JSON, byte for byte what
// encoding/json would write, without reflection (the facts of every
// listing, change and observation).
type jsonAppender interface{ AppendJSON([]byte) []byte }

// appender is an io.Writer that appends to a slice.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// encodeFrame queues the frame prefix, v as JSON, and the version
// member: the head is written into room left before the body, so the
// frame is one buffer and one write.
func (s *Stream) encodeFrame(prefix string, v any) error {
	bp := frameBufs.Get().(*[]byte)
	a := appender{b: append((*bp)[:0], make([]byte, frameHeadRoom)...)}
	a.b = append(a.b, prefix...)
	if j, ok := v.(jsonAppender); ok {
		a.b = append(j.AppendJSON(a.b), '\n')
	} else if err := json.NewEncoder(&a).Encode(v); err != nil {
		*bp = a.b[:0]
		frameBufs.Put(bp)
		return err
	}
	b := append(a.b[:len(a.b)-1], `,"jsonrpc":"2.0"}`...) // Encode ends with a newline
	head := "Content-Length: " + strconv.Itoa(len(b)-frameHeadRoom) + "\r\n\r\n"
	start := frameHeadRoom - len(head)
	copy(b[start:], head)
	*bp = b
	return s.out.putFrame(outFrame{body: b[start:], buf: bp})
}

func (s *Stream) writeFrame(data []byte) error {
	return s.out.put([]byte("Content-Length: "+strconv.Itoa(len(data))+"\r\n\r\n"), data)
}

// behind reports whether the client has fallen behind.
func (s *Stream) behind() bool { return s.out.backlog() > behindBytes }

// waitRoom waits until output can be queued without waiting, or can never
// be queued again.
func (s *Stream) waitRoom() { s.out.waitBelow(behindBytes) }

// ReadObject reads frames until one holds a well-formed message, which it
// decodes into v. Malformed bodies are answered and skipped.
func (s *Stream) ReadObject(v any) error {
	if s.held != nil {
		<-s.held
	}
	for {
		body, err := s.readFrame()
		var skipped *skippedFrame
		if errors.As(err, &skipped) {
			s.logger.Printf("rpc: %v", err)
			if err := s.writeFrame(errorFrame(nil, codeInvalidRequest, "invalid request: "+err.Error())); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if err != io.EOF && !s.closed.Load() {
				s.logger.Printf("rpc: %v; closing the connection", err)
			}
			return io.EOF
		}
		env, params, code, msg := checkMessage(body)
		if code == 0 {
			if err := json.Unmarshal(env, v); err == nil {
				s.params = params
				return nil
			} else {
				code, msg = codeInvalidRequest, "invalid request: "+err.Error()
			}
		}
		if err := s.writeFrame(errorFrame(nil, code, msg)); err != nil {
			return err
		}
	}
}

// Close stops taking frames, waits until what is queued has been written
// (or writing failed or stalled), and closes the underlying closer.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.out.close()
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}

// skippedFrame is a frame whose body was too large to read: it was
// skipped, and the stream reads on.
type skippedFrame struct{ length int64 }

func (e *skippedFrame) Error() string {
	return fmt.Sprintf("a message of %d bytes is over the limit of %d bytes; it was skipped unread", e.length, MaxFrame)
}

// readFrame reads one header block and its body. A header it cannot get
// past is an error; a body over MaxFrame is skipped (*skippedFrame).
func (s *Stream) readFrame() ([]byte, error) {
	var length int64 = -1
	block := 0
	for first := true; ; first = false {
		line, err := s.r.ReadSlice('\n')
		switch {
		case err == io.EOF && len(line) == 0 && first:
			return nil, io.EOF
		case err == bufio.ErrBufferFull || (err == nil && len(line) > MaxHeaderLine):
			return nil, fmt.Errorf("frame header line longer than %d bytes", MaxHeaderLine)
		case err != nil:
			return nil, fmt.Errorf("truncated frame header: %w", err)
		}
		if block += len(line); block > MaxHeaderBlock {
			return nil, fmt.Errorf("frame header block longer than %d bytes", MaxHeaderBlock)
		}
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return nil, fmt.Errorf("frame header line not ended by CRLF: %q", line)
		}
		text := string(line[:len(line)-2])
		if text == "" {
			break
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("malformed frame header %q", text)
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad Content-Length %q", value)
			}
			length = n
		}
	}
	if length < 0 {
		return nil, fmt.Errorf("frame without Content-Length")
	}
	if length > MaxFrame {
		// Read through, never kept: the next frame starts after it.
		if _, err := io.CopyN(io.Discard, s.r, length); err != nil {
			return nil, fmt.Errorf("truncated frame body: %w", err)
		}
		return nil, &skippedFrame{length}
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

// checkMessage checks that body is one JSON-RPC request or response the
// jsonrpc2 package can decode. It returns the message for jsonrpc2 without
// its params, and the params (nil when absent); or else the error code and
// message to answer (with id null).
func checkMessage(body []byte) (env []byte, params *json.RawMessage, code int64, msg string) {
	fail := func(c int64, m string) ([]byte, *json.RawMessage, int64, string) {
		return nil, nil, c, m
	}
	if n := countValues(body, MaxValues); n > MaxValues {
		return fail(codeInvalidRequest, fmt.Sprintf("invalid request: a message may hold at most %d array elements and object members; it was not parsed", MaxValues))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		if _, syntax := errors.AsType[*json.SyntaxError](err); syntax {
			return fail(codeParseError, "parse error: the message body is not valid JSON")
		}
		return fail(codeInvalidRequest, "invalid request: a message must be a JSON object (batches are not supported)")
	}
	if v, ok := m["jsonrpc"]; !ok || !bytes.Equal(bytes.TrimSpace(v), []byte(`"2.0"`)) {
		return fail(codeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	out := map[string]json.RawMessage{"jsonrpc": m["jsonrpc"]}
	if raw, ok := m["id"]; ok {
		if c, text := checkID(raw); c != 0 {
			return fail(c, text)
		}
		out["id"] = raw
	}
	// As jsonrpc2 tells them apart: "result" (null included) or a non-null
	// "error" make a response, "method" a request.
	_, hasResult := m["result"]
	e, hasError := m["error"]
	isResponse := hasResult || (hasError && !bytes.Equal(bytes.TrimSpace(e), []byte("null")))
	method, isRequest := m["method"]
	switch {
	case isRequest && isResponse:
		return fail(codeInvalidRequest, "invalid request: a message is a request or a response, not both")
	case isRequest:
		var name string
		if json.Unmarshal(method, &name) != nil || name == "" {
			return fail(codeInvalidRequest, "invalid request: method must be a non-empty string")
		}
		if len(name) > maxEnvelopeString {
			return fail(codeInvalidRequest, fmt.Sprintf("invalid request: method is %d bytes; the limit is %d bytes", len(name), maxEnvelopeString))
		}
		out["method"] = method
		if p, ok := m["params"]; ok {
			t := bytes.TrimSpace(p)
			if len(t) == 0 || (t[0] != '{' && t[0] != '[' && !bytes.Equal(t, []byte("null"))) {
				return fail(codeInvalidRequest, "invalid request: params must be an object or an array")
			}
			params = &p
		}
	case isResponse:
		// The helper sends no requests, so a response is only logged:
		// what it carries does not matter.
		out["result"] = json.RawMessage("null")
	default:
		return fail(codeInvalidRequest, "invalid request: neither a request nor a response")
	}
	env, err := json.Marshal(out)
	if err != nil {
		return fail(codeInvalidRequest, "invalid request: "+err.Error())
	}
	return env, params, 0, ""
}

// checkID checks a message id: a string of at most maxEnvelopeString bytes
// or a non-negative integer.
func checkID(raw json.RawMessage) (int64, string) {
	const bad = "invalid request: id must be a string or a non-negative integer"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return codeInvalidRequest, bad
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return codeInvalidRequest, bad
		}
		if len(s) > maxEnvelopeString {
			return codeInvalidRequest, fmt.Sprintf("invalid request: a string id is at most %d bytes", maxEnvelopeString)
		}
		return 0, ""
	case 'n':
		return codeInvalidRequest, bad // jsonrpc2 cannot answer a null id distinctly
	default:
		// jsonrpc2 reads numeric ids as int64.
		if n, err := strconv.ParseInt(string(raw), 10, 64); err != nil || n < 0 {
			return codeInvalidRequest, bad
		}
		return 0, ""
	}
}

// countValues counts the array elements and object members of a JSON text
// at every depth, stopping once the count passes limit. It does not
// validate (the parse that follows does), so for malformed input the count
// is only an estimate. Strings are skipped with IndexByte, so a large
// string costs little.
func countValues(b []byte, limit int) int {
	n := 0
	opened := false // a container just opened: its first element counts when it begins
	for i := 0; i < len(b) && n <= limit; i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r', ':':
		case '[', '{':
			if opened {
				n++
			}
			opened = true
		case ']', '}':
			opened = false
		case ',':
			n++
		case '"':
			if opened {
				n++
				opened = false
			}
			i = stringEnd(b, i+1)
		default:
			if opened {
				n++
				opened = false
			}
		}
	}
	return n
}

// stringEnd returns the index of the quote that ends the string whose
// contents start at from, or len(b) when it does not end.
func stringEnd(b []byte, from int) int {
	for {
		k := bytes.IndexByte(b[from:], '"')
		if k < 0 {
			return len(b)
		}
		q := from + k
		escapes := 0
		for j := q - 1; j >= from && b[j] == '\\'; j-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q
		}
		from = q + 1
	}
}

// errorFrame is an error response under id (nil: null).
func errorFrame(id json.RawMessage, code int64, msg string) []byte {
	kind := map[int64]string{codeParseError: "parse", codeInvalidRequest: "invalid-request", CodeUnavailable: "unavailable"}[code]
	if id == nil {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": code, "message": msg, "data": map[string]string{"kind": kind}},
	})
	return data
}
