package extauthz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/mcphttp"
)

// Headers of the MCP 2026 transport (2026-07-28) that name a message's method and target, so that
// proxies can route without reading the body; when the body is there too, both must agree.
const (
	headerMethod   = "mcp-method"
	headerName     = "mcp-name"
	headerProtocol = "mcp-protocol-version"
	// Envoy sets it when with_request_body.allow_partial_message cut the body.
	headerPartialBody = "x-envoy-auth-partial-body"
	// metaProtocol is the _meta member of an MCP 2026 request that names its protocol version.
	metaProtocol = "io.modelcontextprotocol/protocolVersion"
)

// codeHeaderMismatch is MCP 2026's JSON-RPC error for headers that are missing, malformed or
// disagree with the body (HeaderMismatch).
const codeHeaderMismatch = -32020

// message is the MCP message a request carries, as far as a decision needs it.
type message struct {
	Method string                     // the JSON-RPC method; "" for GET, DELETE and responses
	ID     json.RawMessage            // the JSON-RPC id; nil for notifications
	Params map[string]json.RawMessage // nil when absent
	Body   bool                       // the message came from the body
	// Headers: the message was read from its Mcp-Method and Mcp-Name headers alone (an MCP 2026
	// request whose body the sidecar did not send).
	Headers bool
	// Modern: the request is of MCP 2026-07-28 or later (by its MCP-Protocol-Version header or
	// its params._meta).
	Modern bool
}

// problem is a request that cannot be decided: it is refused before the policy, with its
// JSON-RPC code and HTTP status.
type problem struct {
	status int
	code   int
	msg    string
}

func (p *problem) Error() string { return p.msg }

func badRequest(code int, format string, args ...any) *problem {
	return &problem{status: http.StatusBadRequest, code: code, msg: fmt.Sprintf(format, args...)}
}

// headers returns the request's headers with lower-case names, from the map Envoy sends or,
// when Envoy sends raw headers (encode_raw_headers), from the header map. Repeated headers are
// joined with commas, as Envoy does.
func headers(h *authv3.AttributeContext_HttpRequest) map[string]string {
	if len(h.GetHeaders()) > 0 || h.GetHeaderMap() == nil {
		out := make(map[string]string, len(h.GetHeaders()))
		for k, v := range h.GetHeaders() {
			out[strings.ToLower(k)] = v
		}
		return out
	}
	out := map[string]string{}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		k := strings.ToLower(hv.GetKey())
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		if prev, ok := out[k]; ok {
			v = prev + "," + v
		}
		out[k] = v
	}
	return out
}

// readMessage reads the MCP message of a request to an MCP endpoint: from the body, which Envoy
// sends when the ext_authz filter (or the route) asks for it, cross-checked with the MCP 2026
// Mcp-Method, Mcp-Name and MCP-Protocol-Version headers; from those headers alone when the body
// was not sent and the request is of MCP 2026, whose servers refuse a body that disagrees with
// its headers. A request of an older version is read from its body only: its servers do not
// check the headers, so they could say anything.
func readMessage(h *authv3.AttributeContext_HttpRequest, hdr map[string]string) (message, *problem) {
	switch h.GetMethod() {
	case http.MethodGet, http.MethodDelete, http.MethodHead, http.MethodOptions:
		// A GET opens the server's event stream; a DELETE ends the session.
		return message{}, nil
	case http.MethodPost:
	default:
		return message{}, &problem{status: http.StatusMethodNotAllowed, code: mcphttp.CodeInvalidRequest,
			msg: fmt.Sprintf("HTTP %s is not an MCP request: MCP endpoints take POST, GET and DELETE", h.GetMethod())}
	}
	if hdr[headerPartialBody] == "true" {
		return message{}, &problem{status: http.StatusRequestEntityTooLarge, code: mcphttp.CodeInvalidRequest,
			msg: "the message is larger than the sidecar sends for authorization (ext_authz with_request_body.max_request_bytes), so it cannot be checked: send a smaller message, or raise the limit"}
	}
	body := h.GetRawBody()
	if len(body) == 0 && h.GetBody() != "" {
		body = []byte(h.GetBody())
	}
	hMethod, hasMethod := hdr[headerMethod]
	rawName, hasName := hdr[headerName]
	hName, ok := mcp.DecodeHeaderValue(rawName)
	if !ok {
		return message{}, mismatch("the Mcp-Name header is not valid base64 inside =?base64?…?=")
	}
	version := hdr[headerProtocol]
	if len(bytes.TrimSpace(body)) == 0 {
		return headerMessage(version, hMethod, hName, hasName)
	}
	m, p := parseMessage(body)
	if p != nil {
		return m, p
	}
	var meta struct {
		Version *string `json:"io.modelcontextprotocol/protocolVersion"`
	}
	json.Unmarshal(m.Params["_meta"], &meta)
	if meta.Version != nil && version != "" && *meta.Version != version {
		return m, mismatch("the MCP-Protocol-Version header says %q but the message's params._meta[%q] says %q: they must agree", shorten(version), metaProtocol, shorten(*meta.Version))
	}
	// An MCP 2026 request must name its method, and its tool, resource or prompt, in headers.
	m.Modern = modern(version) || (meta.Version != nil && modern(*meta.Version))
	required := m.Method != "" && m.ID != nil && m.Modern
	if required && !hasMethod {
		return m, mismatch("an MCP 2026-07-28 request needs the Mcp-Method header (%q, its method)", shorten(m.Method))
	}
	if hasMethod && hMethod != m.Method {
		return m, mismatch("the Mcp-Method header says %q but the message's method is %q: they must agree", shorten(hMethod), shorten(m.Method))
	}
	if required && !hasName && mcp.MethodRequiresNameHeader(mcp.MCPMethod(m.Method)) {
		return m, mismatch("an MCP 2026-07-28 %s request needs the Mcp-Name header (its params.%s)", shorten(m.Method), nameParam(m.Method))
	}
	if hasName {
		var name string
		json.Unmarshal(m.Params[nameParam(m.Method)], &name)
		if hName != name {
			return m, mismatch("the Mcp-Name header says %q but the message's params.%s is %q: they must agree", shorten(hName), nameParam(m.Method), shorten(name))
		}
	}
	return m, nil
}

// headerMessage is the message of a POST whose body the sidecar did not send, read from its
// headers: only for MCP 2026 requests, with the headers that version requires.
func headerMessage(version, method, name string, hasName bool) (message, *problem) {
	if !modern(version) {
		v := "no MCP-Protocol-Version header"
		if version != "" {
			v = fmt.Sprintf("MCP-Protocol-Version %q", shorten(version))
		}
		return message{}, badRequest(mcphttp.CodeInvalidRequest,
			"the sidecar did not send the request body, and a request with %s is decided from its body (only MCP 2026-07-28 servers check the Mcp-Method and Mcp-Name headers against it): "+
				"configure the ext_authz filter with with_request_body on this route (lushctl mesh xds does)", v)
	}
	if method == "" {
		return message{}, mismatch("an MCP 2026-07-28 request needs the Mcp-Method header (its method)")
	}
	for _, known := range decidedMethods {
		if method != known && strings.EqualFold(method, known) {
			// Values are case-sensitive: a server would find it disagrees with the body's method.
			return message{}, mismatch("the Mcp-Method header says %q: method names are case-sensitive (%q)", shorten(method), known)
		}
	}
	m := message{Method: method, Headers: true, Modern: true}
	if mcp.MethodRequiresNameHeader(mcp.MCPMethod(method)) {
		if !hasName || name == "" {
			return m, mismatch("an MCP 2026-07-28 %s request needs the Mcp-Name header (its params.%s)", shorten(method), nameParam(method))
		}
	}
	if hasName {
		m.Params = map[string]json.RawMessage{}
		m.Params[nameParam(method)], _ = json.Marshal(name)
	}
	return m, nil
}

// decidedMethods are the methods a request to an MCP server is decided as (checkServer), beside
// notifications.
var decidedMethods = []string{"tools/call", "tools/list", "resources/list", "resources/templates/list", "resources/read",
	"resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
	"initialize", "ping", "logging/setLevel", "server/discover", "subscriptions/listen"}

// modern reports whether version is MCP 2026-07-28 or a later date (YYYY-MM-DD dates compare as
// strings), whose requests carry the Mcp-Method and Mcp-Name headers. The generated xDS routes
// the same versions to the routes without bodies.
func modern(version string) bool {
	if len(version) != len("2026-07-28") || version[4] != '-' || version[7] != '-' {
		return false
	}
	for i, c := range version {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return version >= mcp.ProtocolVersion20260728
}

// mismatch refuses a request whose MCP headers are missing, malformed or disagree with its body:
// 400 with MCP's HeaderMismatch error.
func mismatch(format string, args ...any) *problem {
	return &problem{status: http.StatusBadRequest, code: codeHeaderMismatch, msg: "header mismatch: " + fmt.Sprintf(format, args...)}
}

// peekID is the JSON-RPC id of a request's body, when the body is a JSON object that has one: an
// answer to a request that is refused before its message is read still names the request.
func peekID(h *authv3.AttributeContext_HttpRequest) json.RawMessage {
	body := h.GetRawBody()
	if len(body) == 0 {
		body = []byte(h.GetBody())
	}
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return m.ID
}

// nameParam is the parameter the Mcp-Name header mirrors.
func nameParam(method string) string {
	if strings.HasPrefix(method, "resources/") {
		return "uri"
	}
	return "name"
}

// parseMessage decodes one JSON-RPC message strictly: an object, no duplicate member at the top
// level or in params (a server reading the other copy would run what was not decided), no
// trailing data, no batch.
func parseMessage(body []byte) (message, *problem) {
	body = bytes.TrimSpace(body)
	if body[0] == '[' {
		return message{}, badRequest(mcphttp.CodeInvalidRequest, "JSON-RPC batches are not accepted (MCP 2025-06-18 removed them): send one message per request")
	}
	top, err := decodeObject(body)
	if err != nil {
		return message{}, badRequest(mcphttp.CodeParseError, "the request body is not a JSON-RPC message: %v", err)
	}
	var version string
	if json.Unmarshal(top["jsonrpc"], &version) != nil || version != "2.0" {
		return message{}, badRequest(mcphttp.CodeInvalidRequest, `the message is not JSON-RPC 2.0: it needs "jsonrpc": "2.0"`)
	}
	m := message{Body: true}
	if id, ok := top["id"]; ok {
		m.ID = id
	}
	raw, hasMethod := top["method"]
	if !hasMethod {
		if _, ok := top["result"]; !ok {
			if _, ok := top["error"]; !ok {
				return m, badRequest(mcphttp.CodeInvalidRequest, "the message has no method, result or error")
			}
		}
		return m, nil // a response to the server's request (sampling, elicitation, roots)
	}
	if json.Unmarshal(raw, &m.Method) != nil || m.Method == "" {
		return m, badRequest(mcphttp.CodeInvalidRequest, "the message's method must be a non-empty string")
	}
	if p, ok := top["params"]; ok && string(p) != "null" {
		if m.Params, err = decodeObject(p); err != nil {
			return m, badRequest(mcphttp.CodeInvalidParams, "the params of %s are not a JSON object: %v", shorten(m.Method), err)
		}
	}
	return m, nil
}

// decodeObject decodes a JSON object's members, refusing duplicates and trailing data. The
// object is decoded at once; only when it has more members than names is it read again, to
// name the duplicate.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, err
		}
		return nil, errors.New("not a JSON object")
	}
	if out == nil {
		return nil, errors.New("not a JSON object")
	}
	if members(b) != len(out) {
		return nil, duplicate(b)
	}
	return out, nil
}

// members counts the members of a valid JSON object: the strings at depth one that a colon
// follows.
func members(b []byte) int {
	n, depth := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			j := i + 1
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if depth == 1 {
				k := j + 1
				for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
					k++
				}
				if k < len(b) && b[k] == ':' {
					n++
				}
			}
			i = j
		}
	}
	return n
}

// duplicate names the first member of a JSON object that appears twice.
func duplicate(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token() // {
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		if seen[name] {
			return fmt.Errorf("member %q appears twice", shorten(name))
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return errors.New("a member appears twice")
}

// shorten cuts untrusted text shown in messages.
func shorten(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// remoteAddr is the downstream peer's address as host:port ("" when Envoy sent none).
func remoteAddr(p *authv3.AttributeContext_Peer) string {
	sa := p.GetAddress().GetSocketAddress()
	if sa == nil {
		return ""
	}
	port := sa.GetPortValue()
	if strings.Contains(sa.GetAddress(), ":") {
		return fmt.Sprintf("[%s]:%d", sa.GetAddress(), port)
	}
	return fmt.Sprintf("%s:%d", sa.GetAddress(), port)
}
