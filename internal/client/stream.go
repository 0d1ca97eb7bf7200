package client

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sourcegraph/jsonrpc2"
)

// stream is a jsonrpc2.ObjectStream over Content-Length frames that
// keeps a message's result or params away from jsonrpc2's own decoding,
// which first decodes the whole value generically (every object a map)
// only to tell a request from a response: for a listing of hundreds of
// executions that cost more than the helper's whole answer. ReadObject
// hands jsonrpc2 the envelope and keeps the value aside; the OnRecv
// option of attach puts it back before anyone reads it.
type stream struct {
	rwc io.ReadWriteCloser
	r   *bufio.Reader
	wmu sync.Mutex

	raw *json.RawMessage // read loop only: the value of the message just read

	refused atomic.Pointer[Refused] // set once the helper refused the connection
}

// Refused is a helper's refusal of a connection (another uid, a second
// client of `serve --listen`): an error response with a null id, which
// answers no request, and then the end of the connection.
type Refused struct {
	Code    int64
	Message string
}

func (r *Refused) Error() string { return "the helper refused the connection: " + r.Message }

func (s *stream) refusal() error {
	if r := s.refused.Load(); r != nil {
		return r
	}
	return nil
}

func newStream(rwc io.ReadWriteCloser) *stream {
	return &stream{rwc: rwc, r: bufio.NewReaderSize(rwc, 64<<10)}
}

func (s *stream) WriteObject(obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := fmt.Fprintf(s.rwc, "Content-Length: %d\r\n\r\n", len(data)); err != nil {
		return err
	}
	_, err = s.rwc.Write(data)
	return err
}

func (s *stream) ReadObject(v any) error {
	length := -1
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if k, val, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(val)); err != nil {
				return fmt.Errorf("bad Content-Length %q", val)
			}
		}
	}
	if length < 0 {
		return fmt.Errorf("a frame without Content-Length")
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(s.r, body); err != nil {
		return err
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return err
	}
	if m.Method == nil && len(m.Error) > 0 && string(m.Error) != "null" && (len(m.ID) == 0 || string(m.ID) == "null") {
		// Kept for the calls the close cuts off; the read ends here.
		r := &Refused{}
		if err := json.Unmarshal(m.Error, r); err != nil || r.Message == "" {
			r.Message = string(m.Error)
		}
		s.refused.Store(r)
		return r
	}
	env := map[string]json.RawMessage{"jsonrpc": json.RawMessage(`"2.0"`)}
	if len(m.ID) > 0 {
		env["id"] = m.ID
	}
	var value json.RawMessage
	switch {
	case m.Method != nil:
		name, _ := json.Marshal(*m.Method)
		env["method"] = name
		value = m.Params
	case len(m.Error) > 0 && string(m.Error) != "null":
		env["error"] = m.Error
	default:
		env["result"] = json.RawMessage("null")
		value = m.Result
	}
	envelope, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(envelope, v); err != nil {
		return err
	}
	s.raw = nil
	if len(value) > 0 {
		s.raw = &value
	}
	return nil
}

func (s *stream) Close() error { return s.rwc.Close() }

// attach is the connection option that puts back what ReadObject kept
// aside. It runs on the read loop, between ReadObject and the handler or
// the caller.
func (s *stream) attach() jsonrpc2.ConnOpt {
	return jsonrpc2.OnRecv(func(req *jsonrpc2.Request, resp *jsonrpc2.Response) {
		raw := s.raw
		s.raw = nil
		switch {
		case resp != nil:
			if resp.Error == nil {
				if raw == nil {
					null := json.RawMessage("null")
					raw = &null
				}
				resp.Result = raw
			}
		case req != nil:
			req.Params = raw
		}
	})
}
