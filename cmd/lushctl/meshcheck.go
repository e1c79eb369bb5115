package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lush-agents/lush/mesh/extauthz"
)

type meshCheckFlags struct {
	addr, output string
	failOnDeny   bool
	timeout      time.Duration
}

func newMeshCheckCmd() *cobra.Command {
	var f meshCheckFlags
	cmd := &cobra.Command{
		Use:   "check <request.json>...",
		Short: "Send CheckRequests to an ext_authz server, as Envoy would, and show the answers",
		Long: `Check sends each file's envoy.service.auth.v3.CheckRequest (protobuf JSON, as Envoy sends it:
attributes.request.http with headers and raw_body, source, context_extensions, metadata_context)
to an ext_authz server and shows what the sidecar would do: let the request through (with the
headers Lush adds and removes: header values other than Lush's own are hidden, as they may be
credentials), or answer it with a status and a body (a denial, or a stubbed write).

Use it to debug a mesh setup: capture a request Envoy sent, change it, and see the decision.
"-" reads a request from stdin.`,
		Example: `  lushctl mesh check --ext-authz 127.0.0.1:9191 mesh/extauthz/testdata/checks/call_read_apikey.json
  lushctl mesh check --ext-authz unix:///run/lush/ext_authz.sock -o json request.json
  lushctl mesh check --fail-on-deny request.json   # exit 1 unless every request is let through`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error { return runMeshCheck(cmd, a, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "ext-authz", "127.0.0.1:9191", "the ext_authz server: host:port, or unix:///path for a Unix socket")
	fl.BoolVar(&f.failOnDeny, "fail-on-deny", false, "exit 1 unless every request is let through")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up on a Check after this long")
	outputFlag(cmd, &f.output)
	return cmd
}

// checkAnswer is what the sidecar does with a request.
type checkAnswer struct {
	File       string            `json:"file"`
	Allowed    bool              `json:"allowed"`
	Status     int               `json:"status,omitempty"` // of an answer given at the sidecar
	Outcome    string            `json:"outcome,omitempty"`
	DecisionID string            `json:"decision_id,omitempty"`
	Add        map[string]string `json:"add,omitempty"`
	Remove     []string          `json:"remove,omitempty"`
	Body       string            `json:"body,omitempty"`
}

func runMeshCheck(cmd *cobra.Command, files []string, f *meshCheckFlags) error {
	if err := checkOutput(f.output); err != nil {
		return err
	}
	reqs := make([]*authv3.CheckRequest, len(files))
	for i, name := range files {
		var data []byte
		var err error
		if name == "-" {
			data, err = io.ReadAll(cmd.InOrStdin())
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return usage("read %s: %v", name, err)
		}
		reqs[i] = &authv3.CheckRequest{}
		if err := protojson.Unmarshal(data, reqs[i]); err != nil {
			return usage("%s is not a CheckRequest in protobuf JSON: %v", name, err)
		}
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return usage("--ext-authz %q: %v", f.addr, err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)
	var answers []checkAnswer
	denied := 0
	for i, req := range reqs {
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		resp, err := client.Check(ctx, req, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return &exitError{code: exitRuntime, msg: fmt.Sprintf("check %s at %s: %v", files[i], f.addr, err)}
		}
		a := readAnswer(files[i], resp)
		if !a.Allowed {
			denied++
		}
		answers = append(answers, a)
	}
	if f.output == "json" {
		if err := writeJSON(cmd.OutOrStdout(), answers); err != nil {
			return err
		}
	} else {
		for _, a := range answers {
			printAnswer(cmd.OutOrStdout(), a)
		}
	}
	if f.failOnDeny && denied > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

func readAnswer(file string, resp *authv3.CheckResponse) checkAnswer {
	a := checkAnswer{File: file}
	md := resp.GetDynamicMetadata().GetFields()
	a.Outcome = md["outcome"].GetStringValue()
	a.DecisionID = md["decision_id"].GetStringValue()
	if ok := resp.GetOkResponse(); ok != nil {
		a.Allowed = true
		a.Add = map[string]string{}
		for _, h := range ok.GetHeaders() {
			a.Add[h.GetHeader().GetKey()] = shownHeader(h.GetHeader().GetKey(), h.GetHeader().GetValue())
		}
		a.Remove = ok.GetHeadersToRemove()
		return a
	}
	d := resp.GetDeniedResponse()
	a.Status = int(d.GetStatus().GetCode())
	a.Body = d.GetBody()
	for _, h := range d.GetHeaders() {
		if h.GetHeader().GetKey() == extauthz.HeaderOutcome && a.Outcome == "" {
			a.Outcome = h.GetHeader().GetValue()
		}
	}
	return a
}

// shownHeader hides the values of headers that may carry credentials: only Lush's own are shown.
func shownHeader(name, value string) string {
	if strings.HasPrefix(name, "x-lush-") {
		return value
	}
	return fmt.Sprintf("(hidden, %d bytes)", len(value))
}

// maxShownBody bounds the answer bodies text output shows.
const maxShownBody = 600

func printAnswer(w io.Writer, a checkAnswer) {
	switch {
	case a.Allowed && a.DecisionID == "":
		fmt.Fprintf(w, "%s: PASS (not decided here: the route's own enforcement point decides)\n", a.File)
	case a.Allowed:
		fmt.Fprintf(w, "%s: ALLOW, forwarded to the upstream (decision %s)\n", a.File, a.DecisionID)
	default:
		what := strings.ToUpper(a.Outcome)
		if what == "" || what == "REFUSED" {
			what = "REFUSED"
		}
		fmt.Fprintf(w, "%s: %s, answered at the sidecar with %d", a.File, what, a.Status)
		if a.DecisionID != "" {
			fmt.Fprintf(w, " (decision %s)", a.DecisionID)
		}
		fmt.Fprintln(w)
		body := a.Body
		if len(body) > maxShownBody {
			body = fmt.Sprintf("%s… (%d bytes; -o json shows all)", body[:maxShownBody], len(a.Body))
		}
		fmt.Fprintf(w, "  %s\n", body)
		return
	}
	keys := make([]string, 0, len(a.Add))
	for k := range a.Add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  + %s: %s\n", k, a.Add[k])
	}
	for _, k := range a.Remove {
		fmt.Fprintf(w, "  - %s\n", k)
	}
}
