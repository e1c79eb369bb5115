package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/spf13/cobra"
)

// maxA2AResponse bounds what lushctl a2a reads of one answer (a card, a task, a stream).
const maxA2AResponse = 8 << 20

type a2aFlags struct {
	apiKey, token, output string
	timeout               time.Duration
}

func (f *a2aFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.apiKey, "api-key", "", "send this API key (X-API-Key); default $LUSH_API_KEY")
	cmd.Flags().StringVar(&f.token, "token", "", "send this bearer token; default $LUSH_TOKEN")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Minute, "give up after this long")
	outputFlag(cmd, &f.output)
}

// headers are the credential headers of the command: the flags, else the environment.
func (f *a2aFlags) headers() map[string]string {
	h := map[string]string{}
	key, token := f.apiKey, f.token
	if key == "" {
		key = os.Getenv("LUSH_API_KEY")
	}
	if token == "" {
		token = os.Getenv("LUSH_TOKEN")
	}
	if key != "" {
		h["X-API-Key"] = key
	}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return h
}

// a2aAgent is an A2A agent as lushctl reaches it: its base URL, the HTTP client that carries
// the credentials (only to the base URL's host), and its Agent Card.
type a2aAgent struct {
	base   *url.URL
	client *http.Client
	card   *a2a.AgentCard
}

// resolveA2A fetches the Agent Card of the agent at base the way a2a-go resolves it (the
// well-known path appended to the base URL), with the command's credentials.
func (f *a2aFlags) resolveA2A(ctx context.Context, base string) (*a2aAgent, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, usage("<url> must be an agent's http(s) base URL without credentials, such as http://127.0.0.1:8080/agents/researcher, not %q", base)
	}
	hc := &http.Client{
		Transport:     &a2aClientTransport{host: u.Host, headers: f.headers()},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	card, err := agentcard.NewResolver(hc).Resolve(ctx, base)
	var status *agentcard.ErrStatusNotOK
	switch {
	case errors.As(err, &status):
		return nil, failed("fetch the Agent Card of %s: %s", base, a2aErrorText(err))
	case err != nil: // nothing answered: the command could not run, as lushctl mcp says
		return nil, &exitError{code: exitRuntime, msg: fmt.Sprintf("fetch the Agent Card of %s: %s", base, a2aErrorText(err))}
	}
	return &a2aAgent{base: u, client: hc, card: card}, nil
}

// connect opens an A2A client on the card's JSON-RPC endpoint. Credentials go only to the host
// of the URL the user gave: a card that points elsewhere is refused when they are set.
func (a *a2aAgent) connect(ctx context.Context, withCredentials bool) (*a2aclient.Client, error) {
	endpoint := a.card.URL
	if a.card.PreferredTransport != "" && a.card.PreferredTransport != a2a.TransportProtocolJSONRPC {
		endpoint = ""
		for _, i := range a.card.AdditionalInterfaces {
			if i.Transport == a2a.TransportProtocolJSONRPC {
				endpoint = i.URL
				break
			}
		}
	}
	if endpoint == "" {
		return nil, failed("the Agent Card of %s offers no JSONRPC endpoint (lushctl a2a speaks JSON-RPC only)", a.base)
	}
	e, err := url.Parse(endpoint)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") {
		return nil, failed("the Agent Card of %s: url %q is not an http(s) URL", a.base, endpoint)
	}
	if withCredentials && e.Host != a.base.Host {
		return nil, failed("the Agent Card of %s names an endpoint on another host (%s): lushctl sends credentials only to %s", a.base, e.Host, a.base.Host)
	}
	cl, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: endpoint, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(a.client))
	if err != nil {
		return nil, failed("connect to %s: %v", endpoint, err)
	}
	return cl, nil
}

// a2aClientTransport adds the credential headers to requests to host (never to another host)
// and bounds the answers it reads.
type a2aClientTransport struct {
	host    string
	headers map[string]string
}

func (t *a2aClientTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == t.host && len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	res.Body = &boundedBody{r: io.LimitReader(res.Body, maxA2AResponse+1), c: res.Body}
	return res, nil
}

// boundedBody fails a read past maxA2AResponse bytes instead of reading on.
type boundedBody struct {
	r io.Reader
	c io.Closer
	n int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > maxA2AResponse {
		return 0, fmt.Errorf("the answer is larger than %d bytes", maxA2AResponse)
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.c.Close() }

// a2aErrorText says what went wrong in words a user can act on; a refusal for credentials says
// how to pass them.
func a2aErrorText(err error) string {
	var status *agentcard.ErrStatusNotOK
	msg := err.Error()
	if errors.As(err, &status) {
		msg = status.Status
		if status.StatusCode == http.StatusUnauthorized {
			return msg + ": pass --token or --api-key (or set $LUSH_TOKEN or $LUSH_API_KEY)"
		}
		return msg
	}
	// A JSON-RPC error arrives as "<data.error>: <the code's text>"; Lush's data.error already
	// starts with that text, so say it once.
	for _, e := range []error{a2a.ErrInvalidRequest, a2a.ErrInvalidParams, a2a.ErrTaskNotFound, a2a.ErrUnsupportedOperation,
		a2a.ErrUnsupportedContentType, a2a.ErrInternalError, a2a.ErrMethodNotFound} {
		if errors.Is(err, e) && strings.HasPrefix(msg, e.Error()+": ") {
			msg = strings.TrimSuffix(msg, ": "+e.Error())
		}
	}
	if strings.Contains(msg, "401 Unauthorized") {
		return msg + ": pass --token or --api-key (or set $LUSH_TOKEN or $LUSH_API_KEY)"
	}
	return msg
}

func newA2ACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "a2a",
		Short: "A small A2A client: read an agent's card, send it a message",
		Long: `The a2a commands talk to any Agent2Agent (A2A 0.3, JSON-RPC) agent, such as an agent served
by lushctl run or serve at <url>/agents/<name>, as the principal of an API key or bearer token.
<url> is the agent's base URL: its Agent Card is at <url>/.well-known/agent-card.json.
Credentials are sent only to <url>'s host.`,
	}
	cmd.AddCommand(newA2ACardCmd(), newA2ASendCmd())
	return cmd
}

func newA2ACardCmd() *cobra.Command {
	var f a2aFlags
	cmd := &cobra.Command{
		Use:   "card <url>",
		Short: "Fetch and print an agent's Agent Card",
		Long: `Card fetches the Agent Card at <url>/.well-known/agent-card.json and prints it. Lush answers
an anonymous request with the public card (no skills); with --token or --api-key, the full one.`,
		Example: `  lushctl a2a card http://127.0.0.1:8080/agents/researcher
  lushctl a2a card http://127.0.0.1:8080/agents/researcher --api-key "$KEY" -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			agent, err := f.resolveA2A(ctx, a[0])
			if err != nil {
				return err
			}
			if f.output == "json" {
				return writeJSON(cmd.OutOrStdout(), agent.card)
			}
			return printCard(cmd.OutOrStdout(), agent.card)
		},
	}
	f.register(cmd)
	return cmd
}

func printCard(w io.Writer, c *a2a.AgentCard) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", c.Name)
	if d := strings.TrimSpace(c.Description); d != "" {
		d, _, _ = strings.Cut(d, "\n")
		fmt.Fprintf(tw, "description:\t%s\n", d)
	}
	transport := c.PreferredTransport
	if transport == "" {
		transport = a2a.TransportProtocolJSONRPC
	}
	fmt.Fprintf(tw, "url:\t%s (%s)\n", c.URL, transport)
	fmt.Fprintf(tw, "version:\t%s (A2A %s)\n", c.Version, c.ProtocolVersion)
	fmt.Fprintf(tw, "streaming:\t%t\n", c.Capabilities.Streaming)
	fmt.Fprintf(tw, "extended card:\t%t\n", c.SupportsAuthenticatedExtendedCard)
	names := make([]string, 0, len(c.SecuritySchemes))
	for name := range c.SecuritySchemes {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(tw, "security:\t%s (%s)\n", name, schemeText(c.SecuritySchemes[a2a.SecuritySchemeName(name)]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(c.Skills) == 0 {
		fmt.Fprintln(w, "skills: none shown (an anonymous caller gets the public card; authenticate for the full one)")
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SKILL\tTAGS\tDESCRIPTION")
	for _, s := range c.Skills {
		desc, _, _ := strings.Cut(s.Description, "\n")
		if len(desc) > 80 {
			desc = desc[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, strings.Join(s.Tags, ","), desc)
	}
	return tw.Flush()
}

func schemeText(s a2a.SecurityScheme) string {
	switch s := s.(type) {
	case a2a.HTTPAuthSecurityScheme:
		return "http " + s.Scheme
	case a2a.APIKeySecurityScheme:
		return fmt.Sprintf("API key in %s %s", s.In, s.Name)
	case a2a.OAuth2SecurityScheme:
		if s.Oauth2MetadataURL != "" {
			return "oauth2, metadata " + s.Oauth2MetadataURL
		}
		return "oauth2"
	case a2a.OpenIDConnectSecurityScheme:
		return "openIdConnect " + s.OpenIDConnectURL
	case a2a.MutualTLSSecurityScheme:
		return "mutual TLS"
	default:
		return fmt.Sprintf("%T", s)
	}
}

func newA2ASendCmd() *cobra.Command {
	var f a2aFlags
	var stream bool
	cmd := &cobra.Command{
		Use:   "send <url> <message>",
		Short: "Send an agent a message and print its answer",
		Long: `Send sends one text message (message/send) and prints the answer's text; with --stream
(message/stream) it prints the text as it arrives. With -o json it prints the task (with
--stream, each event as one JSON line). Exits 1 when the agent refuses the message (such as a
denial by its ACL, with the reasons) or the task does not complete.`,
		Example: `  lushctl a2a send http://127.0.0.1:8080/agents/researcher "What does q3.md say?" --api-key "$KEY"
  LUSH_TOKEN=$(cat token) lushctl a2a send --stream http://127.0.0.1:8080/agents/researcher "Summarize Q3"`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(f.output); err != nil {
				return err
			}
			if strings.TrimSpace(a[1]) == "" {
				return usage("<message> is empty: say what the agent should do")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			agent, err := f.resolveA2A(ctx, a[0])
			if err != nil {
				return err
			}
			cl, err := agent.connect(ctx, len(f.headers()) > 0)
			if err != nil {
				return err
			}
			defer func() { _ = cl.Destroy() }()
			params := &a2a.MessageSendParams{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: a[1]})}
			if stream {
				return sendStreaming(ctx, cmd, cl, params, f.output == "json")
			}
			blocking := true
			params.Config = &a2a.MessageSendConfig{Blocking: &blocking}
			res, err := cl.SendMessage(ctx, params)
			if err != nil {
				return failed("message/send to %s: %s", agent.card.Name, a2aErrorText(err))
			}
			if f.output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			}
			return answer(cmd, res, f.output != "json")
		},
	}
	cmd.Flags().BoolVar(&stream, "stream", false, "use message/stream and print the answer as it arrives")
	f.register(cmd)
	return cmd
}

// answer prints the text of a message/send result (when print is set) and fails unless the
// task completed.
func answer(cmd *cobra.Command, res a2a.SendMessageResult, print bool) error {
	switch r := res.(type) {
	case *a2a.Message:
		if print {
			fmt.Fprintln(cmd.OutOrStdout(), textOfParts(r.Parts))
		}
		return nil
	case *a2a.Task:
		if print {
			for _, art := range r.Artifacts {
				if t := textOfParts(art.Parts); t != "" {
					fmt.Fprintln(cmd.OutOrStdout(), t)
				}
			}
		}
		return taskOutcome(r.ID, r.Status)
	default:
		return failed("message/send: an answer that is neither a message nor a task (%T)", res)
	}
}

// taskOutcome is nil for a completed task, else the failure naming its state and status text.
func taskOutcome(id a2a.TaskID, st a2a.TaskStatus) error {
	if st.State == a2a.TaskStateCompleted {
		return nil
	}
	msg := fmt.Sprintf("task %s ended %s", id, st.State)
	if !st.State.Terminal() {
		msg = fmt.Sprintf("task %s is %s (lushctl a2a send does not continue tasks)", id, st.State)
	}
	if st.Message != nil {
		if t := textOfParts(st.Message.Parts); t != "" {
			msg += ": " + t
		}
	}
	return failed("%s", msg)
}

// sendStreaming sends the message with message/stream and prints the answer's text as it
// arrives (or each event as a JSON line).
func sendStreaming(ctx context.Context, cmd *cobra.Command, cl *a2aclient.Client, params *a2a.MessageSendParams, asJSON bool) error {
	out := cmd.OutOrStdout()
	var id a2a.TaskID
	var status *a2a.TaskStatus
	printed, endsLine := false, false
	for ev, err := range cl.SendStreamingMessage(ctx, params) {
		if err != nil {
			return failed("message/stream: %s", a2aErrorText(err))
		}
		if asJSON {
			if err := writeJSONLine(out, ev); err != nil {
				return err
			}
		}
		switch e := ev.(type) {
		case *a2a.Message:
			if !asJSON {
				fmt.Fprintln(out, textOfParts(e.Parts))
			}
			return nil
		case *a2a.Task:
			id, status = e.ID, &e.Status
		case *a2a.TaskArtifactUpdateEvent:
			if !asJSON {
				if t := textOfParts(e.Artifact.Parts); t != "" {
					fmt.Fprint(out, t)
					printed, endsLine = true, strings.HasSuffix(t, "\n")
				}
			}
		case *a2a.TaskStatusUpdateEvent:
			id, status = e.TaskID, &e.Status
			if e.Final {
				if printed && !endsLine {
					fmt.Fprintln(out)
				}
				return taskOutcome(id, e.Status)
			}
		}
	}
	if printed && !endsLine {
		fmt.Fprintln(out)
	}
	if status == nil {
		return failed("message/stream: the stream ended without a task")
	}
	return taskOutcome(id, *status)
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// textOfParts is the text of parts' text parts, one after another.
func textOfParts(parts a2a.ContentParts) string {
	var texts []string
	for _, p := range parts {
		if t, ok := p.(a2a.TextPart); ok {
			texts = append(texts, t.Text)
		}
	}
	return strings.Join(texts, "\n")
}
