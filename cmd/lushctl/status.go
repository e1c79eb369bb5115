package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/internal/manifest"
)

func newStatusCmd() *cobra.Command {
	var (
		replicas                []string
		expect, output          string
		watch                   bool
		timeout, interval, each time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status --replicas URL[,URL...]",
		Short: "Show which build each replica serves (and wait for a rollout)",
		Long: `Status asks each replica's /health which build it serves, whether it is ready, and the last
build it refused (or the last failed poll of its bundle server), and prints one row per replica
and a summary such as "3/3 on 4f2a9c01d2e3".

Exit codes: 0 when every replica answered, is ready and serves the same build (the --expect one,
when given); 1 when not (a replica is down, not ready, or on another build); 2 usage. With --watch
it asks again every --interval until they agree or --timeout passes, so scripts can wait for a
rollout to finish.`,
		Example: `  lushctl status --replicas http://10.0.0.5:8080,http://10.0.0.6:8080,http://10.0.0.7:8080
  # wait (up to 2 minutes) until all three serve the build just published
  lushctl status --replicas http://10.0.0.5:8080,http://10.0.0.6:8080 --expect 4f2a9c01 --watch --timeout 2m
  lushctl status --replicas http://127.0.0.1:8080 -o json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var urls []string
			for _, r := range replicas {
				for _, u := range strings.Split(r, ",") {
					if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
						if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
							return usage("--replicas: %q is not an http(s):// URL", u)
						}
						urls = append(urls, u)
					}
				}
			}
			if len(urls) == 0 {
				return usage("--replicas: give the replicas' base URLs, comma-separated (e.g. http://10.0.0.5:8080)")
			}
			if expect != "" && len(expect) < 4 {
				return usage("--expect %q: give at least 4 characters of the build hash", expect)
			}
			ctx := cmd.Context()
			deadline := time.Now().Add(timeout)
			for {
				rows := askReplicas(ctx, urls, each)
				sum := summarize(rows, expect)
				if !watch || sum.Agree || time.Now().After(deadline) {
					if err := printStatus(cmd.OutOrStdout(), rows, sum, output); err != nil {
						return err
					}
					if !sum.Agree {
						return failed("")
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return failed("interrupted")
				case <-time.After(interval):
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&replicas, "replicas", nil, "the replicas' base URLs, comma-separated (their /health is asked)")
	fl.StringVar(&expect, "expect", "", "agree only when every replica serves this build (hash or prefix)")
	fl.BoolVar(&watch, "watch", false, "ask again every --interval until the replicas agree or --timeout passes")
	fl.DurationVar(&timeout, "timeout", 2*time.Minute, "with --watch: give up after this long (exit 1)")
	fl.DurationVar(&interval, "interval", time.Second, "with --watch: time between two rounds")
	fl.DurationVar(&each, "request-timeout", 3*time.Second, "how long to wait for each replica's answer")
	outputFlag(cmd, &output)
	return cmd
}

// replicaStatus is one replica's answer.
type replicaStatus struct {
	URL       string    `json:"url"`
	Reachable bool      `json:"reachable"`
	Ready     bool      `json:"ready"`
	Revision  string    `json:"revision,omitempty"`
	LoadedAt  time.Time `json:"loaded_at,omitzero"`
	LastError *struct {
		At     time.Time `json:"at"`
		Build  string    `json:"build,omitempty"`
		Reason string    `json:"reason"`
		Error  string    `json:"error"`
	} `json:"last_error,omitempty"`
	Error string `json:"error,omitempty"` // why the replica could not be asked
}

// statusSummary is the rollout's state.
type statusSummary struct {
	Agree    bool           `json:"agree"`
	Revision string         `json:"revision,omitempty"` // the build all agree on
	Ready    int            `json:"ready"`
	Total    int            `json:"total"`
	ByBuild  map[string]int `json:"by_revision"`
	Text     string         `json:"summary"`
}

func askReplicas(ctx context.Context, urls []string, each time.Duration) []replicaStatus {
	rows := make([]replicaStatus, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { rows[i] = askReplica(ctx, u, each) })
	}
	wg.Wait()
	return rows
}

func askReplica(ctx context.Context, base string, each time.Duration) replicaStatus {
	st := replicaStatus{URL: base}
	ctx, cancel := context.WithTimeout(ctx, each)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		st.Error = fmt.Sprintf("%s/health answered %s, not Lush's health document", base, resp.Status)
		return st
	}
	st.URL, st.Reachable = base, true
	st.Ready = st.Ready && resp.StatusCode == http.StatusOK
	return st
}

func summarize(rows []replicaStatus, expect string) statusSummary {
	s := statusSummary{Total: len(rows), ByBuild: map[string]int{}}
	for _, r := range rows {
		if r.Ready {
			s.Ready++
			s.ByBuild[r.Revision]++
		}
	}
	for rev, n := range s.ByBuild {
		if n == s.Total && (expect == "" || strings.HasPrefix(rev, expect)) {
			s.Agree, s.Revision = true, rev
		}
	}
	switch {
	case s.Agree:
		s.Text = fmt.Sprintf("%d/%d on %s", s.Total, s.Total, manifest.Short(s.Revision))
	default:
		var parts []string
		for rev, n := range s.ByBuild {
			parts = append(parts, fmt.Sprintf("%d on %s", n, manifest.Short(rev)))
		}
		if down := s.Total - s.Ready; down > 0 {
			parts = append(parts, fmt.Sprintf("%d not ready", down))
		}
		slices.Sort(parts)
		s.Text = fmt.Sprintf("not agreed (of %d: %s)", s.Total, strings.Join(parts, ", "))
		if expect != "" {
			s.Text += "; expecting " + expect
		}
	}
	return s
}

func printStatus(w io.Writer, rows []replicaStatus, sum statusSummary, output string) error {
	if output == "json" {
		return writeJSON(w, struct {
			Replicas []replicaStatus `json:"replicas"`
			statusSummary
		}{rows, sum})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tREVISION\tREADY\tLAST ERROR")
	for _, r := range rows {
		rev, ready, last := "-", "no", "-"
		if r.Revision != "" {
			rev = manifest.Short(r.Revision)
		}
		if r.Ready {
			ready = "yes"
		}
		switch {
		case !r.Reachable:
			last = "unreachable: " + r.Error
		case r.LastError != nil:
			last = r.LastError.Reason
			if r.LastError.Build != "" {
				last += " " + manifest.Short(r.LastError.Build)
			}
			last += " at " + r.LastError.At.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.URL, rev, ready, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, sum.Text)
	return err
}
