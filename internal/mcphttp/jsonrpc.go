// Package mcphttp serves the Model Context Protocol over HTTP: the streamable HTTP transport
// (stateless requests of MCP 2026-07-28, sessions of 2025-03-26 to 2025-11-25) and the older
// HTTP+SSE transport. It owns JSON-RPC framing, sessions, the per-request protocol fields of
// stateless requests (_meta, Mcp-Method/Mcp-Name headers), streaming (resumable response streams,
// subscriptions/listen) and the HTTP-level checks (body size, Host/Origin, protocol version); what
// a message means is up to its Handler.
//
// Sessions are stateless: a session id is a signed token naming the endpoint, the principal it
// was issued to, the negotiated protocol version and the client. Any replica holding the same key
// accepts it, so a client may reach any replica without sticky sessions. State that cannot be
// carried that way (a GET stream, a legacy SSE stream) lives on the replica that holds the
// connection.
package mcphttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// JSON-RPC and MCP error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Message is one JSON-RPC 2.0 message: a request (ID and Method), a notification (Method only) or
// a response (ID and Result or Error).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// IsRequest reports whether m is a request.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }

// IsResponse reports whether m answers a request.
func (m *Message) IsResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// Error is a JSON-RPC error. It is also the error type Handlers return to choose the code.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Errorf builds an *Error.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// parseMessage decodes one JSON-RPC message, checking its shape. A batch (a JSON array) is an
// error: batching was removed from MCP in 2025-06-18.
func parseMessage(body []byte) (*Message, *Error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, Errorf(CodeInvalidRequest, "empty body: send one JSON-RPC message")
	}
	if body[0] == '[' {
		return nil, Errorf(CodeInvalidRequest, "JSON-RPC batches are not supported (removed in MCP 2025-06-18): send one message per request")
	}
	var m Message
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		if tooDeep(body, err) {
			return nil, Errorf(CodeParseError, "the message nests deeper than %d levels of arrays and objects, the limit: send a flatter message", maxJSONDepth)
		}
		return nil, Errorf(CodeParseError, "the body is not valid JSON: %s", jsonProblem(err))
	}
	if dec.More() {
		return nil, Errorf(CodeParseError, "the body holds more than one JSON value")
	}
	switch {
	case m.JSONRPC != "2.0":
		return nil, Errorf(CodeInvalidRequest, `"jsonrpc" must be "2.0"`)
	case len(m.ID) > 0 && !validID(m.ID):
		return nil, Errorf(CodeInvalidRequest, `"id" must be a string or an integer`)
	case m.Method == "" && len(m.ID) == 0:
		return nil, Errorf(CodeInvalidRequest, `a message needs a "method" (request or notification) or an "id" (response)`)
	case m.Method == "" && m.Result == nil && m.Error == nil:
		return nil, Errorf(CodeInvalidRequest, `a response needs "result" or "error"`)
	case len(m.Params) > 0 && m.Params[0] != '{' && !bytes.Equal(m.Params, []byte("null")):
		return nil, Errorf(CodeInvalidParams, `"params" must be an object`)
	}
	return &m, nil
}

// maxJSONDepth is encoding/json's limit on nesting (its maxNestingDepth): an array or object
// opened deeper is a syntax error that names neither the limit nor the depth.
const maxJSONDepth = 10000

// tooDeep reports whether err is the decoder refusing body for nesting past maxJSONDepth: the
// syntax error is at an opening bracket with maxJSONDepth levels open before it. It reads body
// only up to the error, once.
func tooDeep(body []byte, err error) bool {
	var syn *json.SyntaxError
	if !errors.As(err, &syn) || syn.Offset < 1 || syn.Offset > int64(len(body)) {
		return false
	}
	at := syn.Offset - 1
	return (body[at] == '[' || body[at] == '{') && openAt(body[:at]) >= maxJSONDepth
}

// openAt returns how many arrays and objects are open at the end of valid JSON text that may be
// cut short.
func openAt(prefix []byte) int {
	open, inString, escaped := 0, false, false
	for _, c := range prefix {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			open++
		case c == ']' || c == '}':
			open--
		}
	}
	return open
}

func validID(id json.RawMessage) bool {
	if id[0] == '"' {
		var s string
		return json.Unmarshal(id, &s) == nil
	}
	var n json.Number
	if json.Unmarshal(id, &n) != nil {
		return false
	}
	_, err := n.Int64()
	return err == nil
}

// jsonProblem shortens a JSON decoding error without echoing the input.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("syntax error at byte %d", syn.Offset)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return fmt.Sprintf("field %q has the wrong type", typ.Field)
	}
	return "malformed JSON"
}

// response builds a response message for request id.
func response(id json.RawMessage, result any, rpcErr *Error) ([]byte, error) {
	m := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *Error          `json:"error,omitempty"`
	}{JSONRPC: "2.0", ID: id}
	if id == nil {
		m.ID = json.RawMessage("null")
	}
	if rpcErr != nil {
		m.Error = rpcErr
	} else {
		if result == nil {
			result = struct{}{}
		}
		m.Result = result
	}
	return json.Marshal(m)
}

// notification builds a notification message.
func notification(method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", method, params})
}
