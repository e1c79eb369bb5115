package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/lush-agents/lush/internal/a2acard"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
	"github.com/lush-agents/lush/internal/upstream"
	"github.com/lush-agents/lush/vault"
)

// The bounds of an A2A call: the message Lush sends (in characters, Unicode code points, as the
// tool's input schema's maxLength counts them: up to 4 bytes each in UTF-8), the answer it reads
// (bytes), and the time it waits when the manifest sets no timeout for the tool.
const (
	maxA2AMessage       = 64 << 10
	maxA2AResponse      = 8 << 20
	DefaultA2ATimeout   = 5 * time.Minute
	a2aDelegationMetaNS = "dev.lush/delegation"
)

// a2aTarget is what a call to a remote A2A agent needs from its tool, worked out once when the
// catalog is built: the parsed reference and the time a call may take.
type a2aTarget struct {
	ref     toolref.Ref
	timeout time.Duration
}

// a2aTool is the catalog entry of a remote A2A agent: one tool that sends it a text message.
// A reference that does not parse (the build checked it, so only a corrupt manifest) gives an
// entry whose calls fail.
func a2aTool(t *manifest.Tool) *exposed {
	raw, _ := json.Marshal(map[string]any{
		"name":        alias(t.Ref),
		"description": fmt.Sprintf("Sends a message to the remote A2A agent %s and returns its answer.", t.Ref),
		"inputSchema": map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"message": map[string]any{"type": "string", "minLength": 1, "maxLength": maxA2AMessage, "description": "the message to the agent"}},
			"required":             []string{"message"},
			"additionalProperties": false,
		},
	})
	e := &exposed{Name: alias(t.Ref), Ref: t.Ref, Raw: raw, A2A: t.A2A.URL}
	if ref, err := toolref.Parse(t.Ref); err == nil && ref.Kind == toolref.A2A {
		e.remote = &a2aTarget{ref: ref, timeout: DefaultA2ATimeout}
		if t.TimeoutMS > 0 {
			e.remote.timeout = time.Duration(t.TimeoutMS) * time.Millisecond
		}
	}
	return e
}

// callA2A sends the call's message to the remote A2A agent e names, with the credential the
// decision fetched, and answers with the agent's reply as a tool result. The principal and the
// agent chain travel in the message's metadata. The agent's card comes from the gateway's
// cache; when the endpoint of a cached card does not answer (no connection, or 404), the card
// is fetched again, and the message sent once more only if the card now names another endpoint
// (so a message that may have arrived is never sent twice).
func (c *call) callA2A(ctx context.Context, e *exposed, args any, cred *vault.Credential) (json.RawMessage, error) {
	if e.remote == nil {
		return nil, fmt.Errorf("call %s: not an A2A agent", e.Ref)
	}
	obj, _ := args.(map[string]any)
	text, _ := obj["message"].(string)
	if text == "" || utf8.RuneCountInString(text) > maxA2AMessage {
		return nil, fmt.Errorf("call %s: arguments.message must be a string of 1 to %d characters", e.Ref, maxA2AMessage)
	}
	ctx, cancel := context.WithTimeout(ctx, e.remote.timeout)
	defer cancel()
	var headers map[string]string
	if cred != nil {
		headers = cred.Headers()
	}
	ref := e.remote.ref
	card, fresh, err := c.g.a2aCards.Get(ctx, ref, headers)
	if err != nil {
		return nil, a2aError(e.Ref, err)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})
	chain := c.chain()
	msg.Metadata = map[string]any{a2aDelegationMetaNS: map[string]any{"principal": c.caller.ID, "chain": chain, "depth": c.caller.Depth(chain)}}
	res, endpoint, err := sendA2A(ctx, e.Ref, ref, card, headers, msg)
	if errors.Is(err, errNotDelivered) && !fresh {
		c.g.a2aCards.Forget(ref, headers)
		card, _, ferr := c.g.a2aCards.Get(ctx, ref, headers)
		if ferr != nil {
			return nil, a2aError(e.Ref, ferr)
		}
		if next, ok := a2acard.Endpoint(ref, card); ok && next != endpoint {
			res, _, err = sendA2A(ctx, e.Ref, ref, card, headers, msg)
		}
	}
	if err != nil {
		return nil, a2aError(e.Ref, err)
	}
	return a2aResult(res)
}

// errNotDelivered marks a send that certainly did not reach the agent: no connection to its
// endpoint, or an endpoint that is not there (404).
var errNotDelivered = errors.New("the A2A endpoint did not take the message")

// sendA2A sends msg to the JSON-RPC endpoint card names, with the credential headers (which go
// only to ref's host) and waits for the answer. It returns the endpoint it used.
func sendA2A(ctx context.Context, name string, ref toolref.Ref, card *a2a.AgentCard, headers map[string]string, msg *a2a.Message) (a2a.SendMessageResult, string, error) {
	endpoint, ok := a2acard.Endpoint(ref, card)
	if !ok {
		return nil, "", &upstream.ErrUnavailable{Ref: name, Reason: "its Agent Card offers no JSONRPC endpoint Lush may reach"}
	}
	if u, err := url.Parse(endpoint); err != nil || (len(headers) > 0 && u.Host != ref.Host) {
		// A credential goes only to the host the reference names, never where a card points.
		return nil, endpoint, &upstream.ErrUnavailable{Ref: name, Reason: "its Agent Card's JSONRPC endpoint is on another host than the reference, and the call carries a credential"}
	}
	hc := &http.Client{Transport: &a2aTransport{headers: headers, host: ref.Host}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cl, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: endpoint, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		return nil, endpoint, err
	}
	defer func() { _ = cl.Destroy() }()
	blocking := true
	res, err := cl.SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Config: &a2a.MessageSendConfig{Blocking: &blocking}})
	return res, endpoint, err
}

// a2aError classifies a failed A2A call as upstream failures are classified: cancellation and
// deadlines, and failures already classified, stay themselves; anything else is "unavailable".
func a2aError(ref string, err error) error {
	var unavailable *upstream.ErrUnavailable
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &unavailable) {
		return err
	}
	return &upstream.ErrUnavailable{Ref: ref, Reason: err.Error()}
}

// a2aResult is the MCP tool result of an A2A answer: the text of a message, or of a task's
// status message and artifacts; a task that failed or was rejected is an error result. The A2A
// answer itself is the structured content.
func a2aResult(res a2a.SendMessageResult) (json.RawMessage, error) {
	var texts []string
	isError := false
	switch r := res.(type) {
	case *a2a.Message:
		texts = partsText(r.Parts)
	case *a2a.Task:
		texts = append(texts, fmt.Sprintf("task %s: %s", r.ID, r.Status.State))
		if r.Status.Message != nil {
			texts = append(texts, partsText(r.Status.Message.Parts)...)
		}
		for _, a := range r.Artifacts {
			if a != nil {
				texts = append(texts, partsText(a.Parts)...)
			}
		}
		switch r.Status.State {
		case a2a.TaskStateFailed, a2a.TaskStateRejected, a2a.TaskStateCanceled:
			isError = true
		}
	default:
		return nil, fmt.Errorf("the A2A agent answered with %T, neither a message nor a task", res)
	}
	structured, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode A2A answer: %w", err)
	}
	out, err := json.Marshal(map[string]any{
		"content":           []map[string]any{{"type": "text", "text": strings.Join(texts, "\n")}},
		"structuredContent": json.RawMessage(structured),
		"isError":           isError,
	})
	if err != nil {
		return nil, fmt.Errorf("encode tool result: %w", err)
	}
	return out, nil
}

// partsText is the text of message parts: text parts as they are, data parts as JSON, files by
// name.
func partsText(parts a2a.ContentParts) []string {
	var out []string
	for _, p := range parts {
		switch p := p.(type) {
		case a2a.TextPart:
			out = append(out, p.Text)
		case a2a.DataPart:
			b, _ := json.Marshal(p.Data)
			out = append(out, string(b))
		case a2a.FilePart:
			out = append(out, "[a file]")
		}
	}
	return out
}

// a2aTransport adds a credential's headers to the requests of an A2A call and bounds the
// answers it reads.
type a2aTransport struct {
	headers map[string]string
	host    string // the only host the headers go to
}

func (t *a2aTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != t.host && len(t.headers) > 0 {
		return nil, fmt.Errorf("refusing to send a credential to %s", req.URL.Host)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := agentTransport.RoundTrip(req)
	if err != nil {
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("%w: %w", errNotDelivered, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: POST %s: %s", errNotDelivered, req.URL.Redacted(), resp.Status)
	}
	resp.Body = &boundedBody{rc: resp.Body, left: maxA2AResponse}
	return resp, nil
}

// boundedBody fails a read past its bound rather than cutting the answer short silently.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err // the answer ended exactly at the bound
		}
		return 0, fmt.Errorf("the A2A answer is larger than %d bytes", maxA2AResponse)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
