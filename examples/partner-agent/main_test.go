package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
)

const lushToken = "partner-token-for-lush-0001"

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestTranslator(t *testing.T) {
	var logs bytes.Buffer
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.Handle("/", handler(srv.URL, map[string]string{"lush": lushToken}, slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := context.Background()

	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctx, srv.URL+"/agents/translator")
	if err != nil {
		t.Fatalf("the card is public: %v", err)
	}
	if card.Name != "translator" || card.URL != srv.URL+"/agents/translator/a2a" || len(card.Skills) != 1 || card.Security == nil {
		t.Fatalf("card = %+v", card)
	}

	tests := []struct {
		name, token, text string
		want              string // the answer, "" for a refusal
		metadata          map[string]any
	}{
		{name: "translated", token: lushToken, text: "Q3 revenue grew, and the roadmap is up.", want: "[fr] T3 chiffre d'affaires a augmenté, et le feuille de route est en hausse."},
		{name: "unknown words kept", token: lushToken, text: "Hello Zanzibar", want: "[fr] Bonjour Zanzibar"},
		{name: "delegation logged", token: lushToken, text: "thanks", want: "[fr] merci",
			metadata: map[string]any{"dev.lush/delegation": map[string]any{"principal": "serviceaccount:digest-bot", "chain": []any{"localizer"}}}},
		{name: "no token", text: "hello"},
		{name: "wrong token", token: "nope", text: "hello"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hc := &http.Client{Transport: bearer{tc.token}}
			cl, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc))
			if err != nil {
				t.Fatal(err)
			}
			msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: tc.text})
			msg.Metadata = tc.metadata
			res, err := cl.SendMessage(ctx, &a2a.MessageSendParams{Message: msg})
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "401") {
					t.Fatalf("err = %v, want a 401 refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, ok := res.(*a2a.Message)
			if !ok || len(m.Parts) != 1 || m.Parts[0].(a2a.TextPart).Text != tc.want {
				t.Fatalf("answer = %#v, want %q", res, tc.want)
			}
		})
	}
	if !strings.Contains(logs.String(), "account=lush principal=serviceaccount:digest-bot chain=localizer") {
		t.Errorf("no log line with the delegation:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), lushToken) {
		t.Errorf("a token is logged:\n%s", logs.String())
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "lush "+lushToken+"\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no tokens file", nil, "--tokens-file is required"},
		{"not loopback", []string{"--tokens-file", good, "--addr", "0.0.0.0:0"}, "not loopback"},
		{"bad line", []string{"--tokens-file", write("bad", "# ok\nlush\n")}, "bad:2: want \"<account> <token>\""},
		{"duplicate", []string{"--tokens-file", write("dup", "a x\na y\n")}, "dup:2: account \"a\" appears twice"},
		{"empty", []string{"--tokens-file", write("empty", "\n")}, "no accounts"},
		{"argument", []string{"--tokens-file", good, "extra"}, "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRunServes starts the command's run on a free loopback port and stops it by its context.
func TestRunServes(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("lush "+lushToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--tokens-file", tokens}, w) }()
	t.Cleanup(func() { cancel(); <-done; w.Close(); r.Close() })
	line := make([]byte, 256)
	n, err := r.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	first := string(line[:n])
	if !strings.HasPrefix(first, "partner-agent: serving http://127.0.0.1:") {
		t.Fatalf("start line %q", first)
	}
	base := strings.Fields(first)[2]
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(context.Background(), base)
	if err != nil || card.URL != base+"/a2a" {
		t.Fatalf("card %+v, %v", card, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	done <- nil // for the cleanup
}
