// Command partner-agent runs a stand-in remote A2A agent: the partner's translator that Lush's
// quickstart reaches as a2a://partner.example.com/agents/translator (as examples/notes stands in
// for mcp://notes.example.com/mcp). It runs no model: it translates English to French word by
// word from a small glossary, so its answers are deterministic.
//
//	go run ./examples/partner-agent --tokens-file FILE [--addr 127.0.0.1:8932] [--allow-remote]
//
// It serves, on a2a-go's a2asrv (A2A 0.3, JSON-RPC), until SIGINT or SIGTERM:
//
//	GET  http://ADDR/agents/translator/.well-known/agent-card.json   the Agent Card, to anyone
//	POST http://ADDR/agents/translator/a2a                           message/send, message/stream,
//	     tasks/get, tasks/cancel; only with "Authorization: Bearer <token>" of --tokens-file
//
// It logs one line per message: the account whose token came, and the principal and agent chain
// that Lush's gateway sends in the message's metadata (dev.lush/delegation) — never a token.
package main

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
)

// Routes of the one agent this command serves.
const (
	agentName = "translator"
	cardPath  = "/agents/" + agentName + "/.well-known/agent-card.json"
	rpcPath   = "/agents/" + agentName + "/a2a"
	// maxBody bounds a JSON-RPC request; maxMessage the text translated.
	maxBody    = 1 << 20
	maxMessage = 16 << 10
	maxTokens  = 1000
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "partner-agent:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("partner-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8932", "listen address")
	tokensFile := fs.String("tokens-file", "", `file of "<account> <token>" lines (required): the bearer tokens it accepts`)
	allowRemote := fs.Bool("allow-remote", false, "allow a listen address that is not loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *tokensFile == "":
		return errors.New("--tokens-file is required")
	case !*allowRemote && !isLoopback(*addr):
		return fmt.Errorf("listen address %q is not loopback; pass --allow-remote to serve beyond this host", *addr)
	}
	tokens, err := loadTokens(*tokensFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	base := "http://" + ln.Addr().String()
	httpSrv := &http.Server{Handler: handler(base, tokens, logger), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()
	fmt.Fprintf(stderr, "partner-agent: serving %s/agents/%s (%d accounts)\n", base, agentName, len(tokens))

	select {
	case err := <-served: // Serve returns only on failure before Shutdown
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(stderr, "partner-agent: stopped")
	return nil
}

// handler serves the translator's card and, to holders of a token, its JSON-RPC endpoint.
func handler(base string, tokens map[string]string, logger *slog.Logger) http.Handler {
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(&translator{logger: logger}))
	mux := http.NewServeMux()
	mux.Handle("GET "+cardPath, a2asrv.NewStaticAgentCardHandler(card(base)))
	mux.HandleFunc("POST "+rpcPath, func(w http.ResponseWriter, r *http.Request) {
		account, ok := accountOf(r, tokens)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="partner"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"unauthenticated: send Authorization: Bearer <token>"}`+"\n")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		rpc.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accountKey{}, account)))
	})
	return mux
}

// card is the translator's Agent Card, its endpoint under base.
func card(base string) *a2a.AgentCard {
	return &a2a.AgentCard{
		Name:               agentName,
		Description:        "The partner's translator: English to French, word by word from a glossary (a stand-in: no model runs).",
		URL:                base + rpcPath,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    "0.3.0",
		Version:            "1.0.0",
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "translate-en-fr", Name: "Translate to French",
			Description: "Translates English text to French.", Tags: []string{"translation"}, Examples: []string{"Q3 revenue grew"}}},
		SecuritySchemes: a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "bearer",
			Description: "a token the partner issued to your organisation"}},
		Security: []a2a.SecurityRequirements{{"bearer": a2a.SecuritySchemeScopes{}}},
	}
}

type accountKey struct{}

// accountOf is the account whose bearer token r carries.
func accountOf(r *http.Request, tokens map[string]string) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", false
	}
	for account, want := range tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
			return account, true
		}
	}
	return "", false
}

// translator is the agent: it answers each message with its translation.
type translator struct{ logger *slog.Logger }

func (t *translator) Execute(ctx context.Context, reqCtx *a2asrv.RequestContext, q eventqueue.Queue) error {
	var text strings.Builder
	for _, p := range reqCtx.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text.WriteString(tp.Text)
		}
	}
	if text.Len() > maxMessage {
		return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: fmt.Sprintf("Too long: I translate at most %d bytes at a time.", maxMessage)}))
	}
	account, _ := ctx.Value(accountKey{}).(string)
	principal, chain := delegation(reqCtx.Message.Metadata)
	t.logger.Info("message", "account", account, "principal", principal, "chain", chain, "bytes", text.Len())
	reply := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "[fr] " + translate(text.String())})
	reply.ContextID = reqCtx.ContextID
	return q.Write(ctx, reply)
}

func (t *translator) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil // answers come at once: nothing runs long enough to cancel
}

// delegation reads what Lush's gateway says about who asks (metadata "dev.lush/delegation":
// {principal, chain}). It is informative: the token says who the caller is.
func delegation(meta map[string]any) (principal, chain string) {
	d, _ := meta["dev.lush/delegation"].(map[string]any)
	principal, _ = d["principal"].(string)
	if c, ok := d["chain"].([]any); ok {
		var names []string
		for _, a := range c {
			if s, ok := a.(string); ok {
				names = append(names, s)
			}
		}
		chain = strings.Join(names, ">")
	}
	return principal, chain
}

// glossary is the translator's whole knowledge.
var glossary = map[string]string{
	"the": "le", "a": "un", "and": "et", "of": "de", "in": "en", "is": "est", "we": "nous",
	"q3": "T3", "revenue": "chiffre d'affaires", "grew": "a augmenté", "roadmap": "feuille de route",
	"summary": "résumé", "report": "rapport", "team": "équipe", "ship": "livrer", "ships": "livre", "gateway": "passerelle",
	"hello": "bonjour", "thanks": "merci", "plan": "plan", "draft": "brouillon", "figures": "chiffres",
	"quarter": "trimestre", "up": "en hausse", "down": "en baisse", "hiring": "recrutement",
}

// translate replaces each glossary word of s (case-insensitively) and keeps everything else.
func translate(s string) string {
	var b strings.Builder
	word := []rune{}
	flush := func() {
		if len(word) == 0 {
			return
		}
		w := string(word)
		if fr, ok := glossary[strings.ToLower(w)]; ok {
			if unicode.IsUpper(word[0]) {
				fr = strings.ToUpper(fr[:1]) + fr[1:]
			}
			w = fr
		}
		b.WriteString(w)
		word = word[:0]
	}
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			word = append(word, r)
			continue
		}
		flush()
		b.WriteRune(r)
	}
	flush()
	return b.String()
}

// loadTokens reads "<account> <token>" lines; blank lines and # comments are skipped.
func loadTokens(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	defer f.Close()
	tokens := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"<account> <token>\"", path, n)
		}
		if _, dup := tokens[fields[0]]; dup {
			return nil, fmt.Errorf("%s:%d: account %q appears twice", path, n, fields[0])
		}
		if len(tokens) == maxTokens {
			return nil, fmt.Errorf("%s:%d: more than %d accounts", path, n, maxTokens)
		}
		tokens[fields[0]] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%s: no accounts: add \"<account> <token>\" lines", path)
	}
	return tokens, nil
}

// isLoopback reports whether a listen address stays on this host: localhost or a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
