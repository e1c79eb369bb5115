package mcphttp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// MCP 2026-07-28 (SEP-2575, SEP-2567) made requests stateless: there is no initialize and no
// session; every request carries its protocol version, the client's identity and capabilities in
// params._meta, and its version, method and name in headers (SEP-2243). A server may serve both
// eras on one endpoint: a request is of the stateless era when its MCP-Protocol-Version header or
// its _meta names a version that is not one of the session era's (ProtocolVersions).

// StatelessVersions are the stateless protocol versions this transport speaks, newest first.
var StatelessVersions = []string{"2026-07-28"}

// Headers of MCP 2026-07-28 (SEP-2243).
const (
	HeaderMethod      = "Mcp-Method"
	HeaderName        = "Mcp-Name"
	HeaderParamPrefix = "Mcp-Param-"
)

// The _meta keys of a stateless request.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
)

// Error codes MCP 2026-07-28 defines in the range it reserves (-32020 to -32099).
const (
	CodeHeaderMismatch             = -32020
	CodeMissingClientCapability    = -32021
	CodeUnsupportedProtocolVersion = -32022
)

// removedMethods are the methods of the session era that 2026-07-28 removed: a stateless request
// for one of them is answered 404 with method-not-found.
var removedMethods = []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}

// logLevels are the levels of notifications/message, from the lowest.
var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// sessionEra reports whether v is a version of the session era (or names none).
func sessionEra(v string) bool {
	return v == "" || v == legacyProtocol || slices.Contains(ProtocolVersions, v)
}

// requestMeta is what a stateless request's params._meta says of the request.
type requestMeta struct {
	version    string          // "" when absent
	versionSet bool            // the key is present
	client     ClientInfo      // zero when absent
	caps       json.RawMessage // nil when absent
	logLevel   string
	problem    string // the first malformed field, for a -32602 answer
}

// readMeta reads the protocol fields of params._meta. It never fails: what is wrong is kept in
// problem for the caller to answer.
func readMeta(params json.RawMessage) requestMeta {
	var m requestMeta
	if len(params) == 0 || params[0] != '{' {
		return m
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		m.problem = `params._meta must be an object`
		return m
	}
	if raw, ok := p.Meta[MetaProtocolVersion]; ok {
		m.versionSet = true
		if json.Unmarshal(raw, &m.version) != nil || m.version == "" {
			m.problem = fmt.Sprintf("params._meta[%q] must be a protocol version string", MetaProtocolVersion)
		}
	}
	if raw, ok := p.Meta[MetaClientInfo]; ok && m.problem == "" {
		if raw[0] != '{' || json.Unmarshal(raw, &m.client) != nil {
			m.problem = fmt.Sprintf("params._meta[%q] must be an object with a name and a version", MetaClientInfo)
		}
	}
	if raw, ok := p.Meta[MetaClientCapabilities]; ok && m.problem == "" {
		if raw[0] != '{' {
			m.problem = fmt.Sprintf("params._meta[%q] must be an object", MetaClientCapabilities)
		}
		m.caps = raw
	}
	if raw, ok := p.Meta[MetaLogLevel]; ok && m.problem == "" {
		if json.Unmarshal(raw, &m.logLevel) != nil || !slices.Contains(logLevels, m.logLevel) {
			m.problem = fmt.Sprintf("params._meta[%q] must be one of %s", MetaLogLevel, strings.Join(logLevels, ", "))
		}
	}
	return m
}

// statelessRequest reports whether a POSTed message is of the stateless era.
func statelessRequest(header string, meta requestMeta) bool {
	return !sessionEra(header) || (meta.versionSet && !sessionEra(meta.version))
}

// supportedVersions are the versions this server serves, newest first.
func (s *Server) supportedVersions() []string {
	if !s.cfg.Stateless {
		return ProtocolVersions
	}
	return append(slices.Clone(StatelessVersions), ProtocolVersions...)
}

// SupportedVersions are the protocol versions this server serves, newest first: what
// server/discover answers.
func (s *Server) SupportedVersions() []string { return slices.Clone(s.supportedVersions()) }

// unsupportedVersion is the UnsupportedProtocolVersionError for a requested version.
func (s *Server) unsupportedVersion(requested string) *Error {
	return &Error{Code: CodeUnsupportedProtocolVersion,
		Message: fmt.Sprintf("unsupported protocol version %q: this server speaks %s", requested, strings.Join(s.supportedVersions(), ", ")),
		Data:    map[string]any{"supported": s.supportedVersions(), "requested": requested}}
}

// checkStateless checks a stateless request's version, _meta and headers, in the order the
// specification gives its errors. It returns the HTTP status and error to answer with, or nil.
func (s *Server) checkStateless(r *http.Request, m *Message, header string, meta requestMeta) (int, *Error) {
	supported := s.cfg.Stateless && slices.Contains(StatelessVersions, header)
	switch {
	case !s.cfg.Stateless:
		requested := header
		if sessionEra(requested) {
			requested = meta.version
		}
		return http.StatusBadRequest, s.unsupportedVersion(requested)
	case header == "":
		return http.StatusBadRequest, Errorf(CodeHeaderMismatch, "header mismatch: the %s header is required (it must repeat params._meta[%q])", HeaderProtocol, MetaProtocolVersion)
	case !supported && meta.versionSet && meta.version != header:
		return http.StatusBadRequest, Errorf(CodeHeaderMismatch, "header mismatch: %s %q does not match params._meta[%q] %q", HeaderProtocol, header, MetaProtocolVersion, meta.version)
	case !supported:
		return http.StatusBadRequest, s.unsupportedVersion(header)
	case m.IsResponse():
		return http.StatusBadRequest, Errorf(CodeInvalidRequest, "a %s client does not answer server requests: input requests come in results (multi round-trip requests)", header)
	case meta.problem != "":
		return http.StatusBadRequest, Errorf(CodeInvalidParams, "%s", meta.problem)
	case !meta.versionSet:
		return http.StatusBadRequest, Errorf(CodeInvalidParams, "params._meta[%q] is required: every %s request carries its protocol version", MetaProtocolVersion, header)
	case meta.version != header:
		return http.StatusBadRequest, Errorf(CodeHeaderMismatch, "header mismatch: %s %q does not match params._meta[%q] %q", HeaderProtocol, header, MetaProtocolVersion, meta.version)
	case m.IsRequest() && meta.caps == nil:
		return http.StatusBadRequest, Errorf(CodeInvalidParams, "params._meta[%q] is required: every %s request declares the client's capabilities (an empty object for none)", MetaClientCapabilities, header)
	}
	if rpcErr := checkStandardHeaders(r, m, true); rpcErr != nil {
		return http.StatusBadRequest, rpcErr
	}
	if m.IsRequest() && slices.Contains(removedMethods, m.Method) {
		return http.StatusNotFound, Errorf(CodeMethodNotFound, "method %q does not exist in MCP %s (it belongs to the session era)", m.Method, header)
	}
	return 0, nil
}

// checkStandardHeaders checks the Mcp-Method and Mcp-Name headers against the message: required
// when required is set (stateless requests), else checked only when present.
func checkStandardHeaders(r *http.Request, m *Message, required bool) *Error {
	method, ok := headerValue(r, HeaderMethod)
	required = required && m.IsRequest() // the headers of notifications are not defined
	switch {
	case !ok && required:
		return Errorf(CodeHeaderMismatch, "header mismatch: the %s header is required (it must repeat the body's method %q)", HeaderMethod, m.Method)
	case ok && method != m.Method:
		return Errorf(CodeHeaderMismatch, "header mismatch: %s %q does not match the body's method %q", HeaderMethod, method, m.Method)
	}
	field := nameField(m.Method)
	if field == "" || !m.IsRequest() {
		return nil
	}
	name, ok := headerValue(r, HeaderName)
	if !ok && !required {
		return nil
	}
	body := stringField(m.Params, field)
	if !ok {
		return Errorf(CodeHeaderMismatch, "header mismatch: the %s header is required for %s (it must repeat params.%s)", HeaderName, m.Method, field)
	}
	decoded, err := DecodeHeaderValue(name)
	switch {
	case err != nil:
		return Errorf(CodeHeaderMismatch, "header mismatch: %s: %v", HeaderName, err)
	case decoded != body:
		return Errorf(CodeHeaderMismatch, "header mismatch: %s %q does not match params.%s %q", HeaderName, decoded, field, body)
	}
	return nil
}

// headerValue returns a header's value without the optional whitespace around it, and whether the
// request has the header.
func headerValue(r *http.Request, name string) (string, bool) {
	v, ok := r.Header[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return strings.Trim(v[0], " \t"), true
}

// nameField is the params field the Mcp-Name header repeats for a method, or "".
func nameField(method string) string {
	switch method {
	case "tools/call", "prompts/get":
		return "name"
	case "resources/read":
		return "uri"
	case "tasks/get", "tasks/update", "tasks/cancel": // the tasks extension (SEP-2663)
		return "taskId"
	}
	return ""
}

// stringField returns params' string member name ("" when absent or not a string).
func stringField(params json.RawMessage, name string) string {
	var p map[string]json.RawMessage
	var s string
	if json.Unmarshal(params, &p) == nil {
		json.Unmarshal(p[name], &s)
	}
	return s
}

// The Base64 sentinel of header values that are not plain ASCII (SEP-2243).
const (
	base64Prefix = "=?base64?"
	base64Suffix = "?="
)

// DecodeHeaderValue decodes an Mcp-Name or Mcp-Param-* value: a value wrapped in the Base64
// sentinel (=?base64?…?=) is decoded; any other value is itself.
func DecodeHeaderValue(v string) (string, error) {
	inner, ok := strings.CutPrefix(v, base64Prefix)
	if !ok {
		return v, nil
	}
	inner, ok = strings.CutSuffix(inner, base64Suffix)
	if !ok {
		return v, nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(inner)
	if err != nil {
		return "", fmt.Errorf("the value is not valid Base64 inside %s…%s", base64Prefix, base64Suffix)
	}
	return string(b), nil
}

// withResultType adds resultType "complete" to an encoded result object that has none: results
// of 2026-07-28 carry their type.
func withResultType(result []byte) []byte {
	if len(result) < 2 || result[0] != '{' {
		return result
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(result, &top) != nil {
		return result
	}
	if _, ok := top["resultType"]; ok {
		return result
	}
	rest := bytes.TrimSpace(result[1:])
	out := make([]byte, 0, len(result)+32)
	out = append(out, `{"resultType":"complete"`...)
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// statelessStatus is the HTTP status of an error a handler answers a stateless request with:
// the JSON-RPC error is the payload (200), except for the errors whose status the specification
// fixes.
func statelessStatus(code int) int {
	switch code {
	case CodeMethodNotFound:
		return http.StatusNotFound
	case CodeHeaderMismatch, CodeMissingClientCapability, CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// statelessResult is a handler's result with the resultType 2026-07-28 requires.
func statelessResult(result any) any {
	if result == nil {
		return json.RawMessage(`{"resultType":"complete"}`)
	}
	raw, ok := result.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(result); err != nil {
			return result // response reports it
		}
	}
	return json.RawMessage(withResultType(raw))
}

// CheckParamHeaders checks the Mcp-Param-* headers of a stateless tools/call against its
// arguments, for the tool's input schema (the properties it marks with x-mcp-header): each
// argument such a property names must come in its header too, with the same value (SEP-2243).
// The transport does not know the tools: the Handler calls it once it has found the tool. It
// returns a HeaderMismatch *Error (answered 400), or nil; session-era requests are not checked.
func (r *Request) CheckParamHeaders(inputSchema json.RawMessage) error {
	if !r.stateless || r.Method != "tools/call" || len(inputSchema) == 0 || !bytes.Contains(inputSchema, []byte("x-mcp-header")) {
		return nil
	}
	lookup := func(name string) (string, bool) { return headerValue(r.HTTP, http.CanonicalHeaderKey(name)) }
	if err := mcp.ValidateParamHeadersLookup(lookup, &mcp.Tool{RawInputSchema: inputSchema}, r.Params); err != nil {
		return Errorf(CodeHeaderMismatch, "%v", err)
	}
	return nil
}

// inputCapabilities are the client capabilities the input requests of a multi round-trip
// result (2026-07-28) need, by method.
var inputCapabilities = map[string]string{
	"sampling/createMessage": "sampling",
	"elicitation/create":     "elicitation",
	"roots/list":             "roots",
}

// checkInputRequests refuses a stateless request's input_required result whose input requests
// need capabilities the client did not declare in the request: a server must not rely on them
// (MissingRequiredClientCapabilityError, -32021, with the capabilities in data). The result is
// returned encoded.
func checkInputRequests(req *Request, result any) (any, error) {
	raw, ok := result.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(result); err != nil {
			return result, nil // response reports it
		}
	}
	if !bytes.Contains(raw, []byte("input_required")) {
		return raw, nil
	}
	var r struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
		} `json:"inputRequests"`
	}
	if json.Unmarshal(raw, &r) != nil || r.ResultType != "input_required" {
		return raw, nil
	}
	var declared map[string]json.RawMessage
	json.Unmarshal(req.Capabilities(), &declared)
	missing := map[string]any{}
	var names []string
	for _, in := range r.InputRequests {
		if c, ok := inputCapabilities[in.Method]; ok && declared[c] == nil && missing[c] == nil {
			missing[c] = map[string]any{}
			names = append(names, c)
		}
	}
	if len(missing) == 0 {
		return raw, nil
	}
	slices.Sort(names)
	return nil, &Error{Code: CodeMissingClientCapability,
		Message: fmt.Sprintf("the request needs client capabilities it did not declare in params._meta[%q]: %s", MetaClientCapabilities, strings.Join(names, ", ")),
		Data:    map[string]any{"requiredCapabilities": missing}}
}

// codeResourceNotFound is the session era's resource-not-found code, which 2026-07-28 replaced
// with -32602 and forbids emitting.
const codeResourceNotFound = -32002

// statelessError is an error as a stateless request is answered with: the codes 2026-07-28
// retired are replaced by their successors.
func statelessError(e *Error) *Error {
	if e.Code != codeResourceNotFound {
		return e
	}
	return &Error{Code: CodeInvalidParams, Message: e.Message, Data: e.Data}
}
