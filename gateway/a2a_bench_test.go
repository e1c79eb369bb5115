package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/internal/manifest"
	"github.com/lush-agents/lush/internal/toolref"
)

// benchEcho is an A2A agent that answers every message with "ok".
type benchEcho struct{}

func (benchEcho) Execute(ctx context.Context, _ *a2asrv.RequestContext, q eventqueue.Queue) error {
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "ok"}))
}

func (benchEcho) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error { return nil }

// BenchmarkA2ACall sends one message to an a2a-go agent on loopback, three ways:
//   - client=a2a-go: a bare a2a-go JSON-RPC client, made once (the protocol's own cost: the floor);
//   - card=every-call: callA2A as it was, fetching the Agent Card and parsing the reference for
//     every call;
//   - card=cached: callA2A with the card from the gateway's cache (the reference parsed once,
//     when the catalog was built).
//
// Not measured: the decision and the decision log, which are the same for every tool
// (BenchmarkGatewayCall).
//
// Besides the wall time, cpu-µs/op is the process's CPU time per call (client and server: both
// run in it), which other load on the machine changes less.
//
//	go test ./gateway -run '^$' -bench BenchmarkA2ACall -benchmem -count 6
func BenchmarkA2ACall(b *testing.B) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	card := &a2a.AgentCard{Name: "echo", Description: "echoes", URL: srv.URL + "/agent/rpc", Version: "1", ProtocolVersion: "0.3.0",
		PreferredTransport: a2a.TransportProtocolJSONRPC, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "echoes", Tags: []string{"echo"}}}}
	mux.Handle("GET /agent"+a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("POST /agent/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(benchEcho{})))
	refText := "a2a+http://" + strings.TrimPrefix(srv.URL, "http://") + "/agent"
	ctx := context.Background()

	b.Run("client=a2a-go", func(b *testing.B) {
		cl, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: card.URL, Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(&http.Client{Transport: agentTransport}))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cl.Destroy() }()
		blocking := true
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "hello"})
			if _, err := cl.SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Config: &a2a.MessageSendConfig{Blocking: &blocking}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, cached := range []bool{false, true} {
		name := map[bool]string{false: "card=every-call", true: "card=cached"}[cached]
		b.Run(name, func(b *testing.B) {
			e := a2aTool(&manifest.Tool{Ref: refText, A2A: &manifest.A2A{URL: srv.URL + "/agent"}})
			c := &call{g: &Gateway{}, agent: "assistant", caller: identity.Caller{ID: "serviceaccount:bot"}}
			args := map[string]any{"message": "hello"}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if !cached { // the old behaviour: the reference parsed and the card fetched per call
					ref, err := toolref.Parse(e.Ref)
					if err != nil {
						b.Fatal(err)
					}
					c.g.a2aCards.Forget(ref, nil)
				}
				out, err := c.callA2A(ctx, e, args, nil)
				if err != nil || !strings.Contains(string(out), `"text":"ok"`) {
					b.Fatalf("%v %s", err, out)
				}
			}
		})
	}
}

// reportCPU starts measuring the process's CPU time; the function it returns reports it per op.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op") }
}
