// Package telemetry holds Lush's Prometheus metrics, its OpenTelemetry tracing setup, and the
// limiter that keeps a flood of one event from flooding the log (LogLimiter). Nothing here is
// global: a Metrics value owns its registry, tracer providers are passed to the components that
// use them, and each limiter belongs to whoever logs through it.
package telemetry

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the gateway's Prometheus metrics. Labels never carry principals or arguments:
// they are bounded by the build (agents, tools) and by fixed vocabularies (outcome, access).
type Metrics struct {
	Registry *prometheus.Registry

	Decisions        *prometheus.CounterVec   // lush_decisions_total{point,action,agent,tool,access,outcome}
	Stubs            *prometheus.CounterVec   // lush_stubbed_writes_total{agent,tool}
	DecisionLatency  *prometheus.HistogramVec // lush_decision_duration_seconds{point}
	UpstreamLatency  *prometheus.HistogramVec // lush_upstream_duration_seconds{tool,status}
	LogWriteFailures prometheus.Counter       // lush_decision_log_write_failures_total
	UpstreamRestarts *prometheus.CounterVec   // lush_upstream_restarts_total{tool}
	UpstreamUp       *prometheus.GaugeVec     // lush_upstream_up{tool}
	Reloads          *prometheus.CounterVec   // lush_bundle_reloads_total{result}
	Revision         *prometheus.GaugeVec     // lush_bundle_revision_info{revision}
	DeclaredTools    *prometheus.GaugeVec     // lush_agent_tool_declared{agent,tool,access}
	BuildInfo        *prometheus.GaugeVec     // lush_build_info{revision}
	BuildLoaded      prometheus.Gauge         // lush_build_loaded_timestamp_seconds
	BundleRefused    *prometheus.CounterVec   // lush_bundle_refused_total{reason}
	BundleFailures   prometheus.Counter       // lush_bundle_download_failures_total

	Invocations       *prometheus.CounterVec   // lush_agent_invocations_total{agent,status}
	InvocationLatency *prometheus.HistogramVec // lush_agent_invocation_duration_seconds{agent}
	Tokens            *prometheus.CounterVec   // lush_agent_tokens_total{agent,model,kind}
	AgentToolCalls    *prometheus.CounterVec   // lush_agent_tool_calls_total{agent,status}

	LoopFirings *prometheus.CounterVec // lush_loop_firings_total{loop,status}

	Approvals *prometheus.CounterVec // lush_approvals_total{event}
	LoopLag   prometheus.Histogram   // lush_loop_firing_lag_seconds

	AuthFailures *prometheus.CounterVec // lush_authentication_failures_total{method,reason}
}

// NewMetrics creates the metrics in a new registry, with the Go runtime and process collectors.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_decisions_total",
			Help: "Policy decisions, by enforcement point, action, agent, tool, access and outcome (allow, stub, approval_required, deny, error)."},
			[]string{"point", "action", "agent", "tool", "access", "outcome"}),
		Stubs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_stubbed_writes_total",
			Help: "Write calls answered with a stub because live writes are off."}, []string{"agent", "tool"}),
		DecisionLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lush_decision_duration_seconds",
			Help:    "Time to evaluate a policy decision.",
			Buckets: []float64{10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3}}, []string{"point"}),
		UpstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lush_upstream_duration_seconds",
			Help:    "Time an upstream MCP server or local tool took to answer a call, by status (ok, error, timeout, cancelled, unavailable).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14)}, []string{"tool", "status"}),
		LogWriteFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "lush_decision_log_write_failures_total",
			Help: "Decisions that could not be written to the decision log (the calls were denied)."}),
		UpstreamRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_upstream_restarts_total",
			Help: "Times an upstream MCP server was started again after being lost."}, []string{"tool"}),
		UpstreamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lush_upstream_up",
			Help: "1 when the upstream MCP server is connected, 0 when it is down."}, []string{"tool"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_bundle_reloads_total",
			Help: "Bundle reloads, by result (ok, rejected)."}, []string{"result"}),
		Revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lush_bundle_revision_info",
			Help: "The bundle revision being served (value 1)."}, []string{"revision"}),
		DeclaredTools: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lush_agent_tool_declared",
			Help: "Tools the served build lets each agent use (value 1), by access: with lush_decisions_total, the declared tools that go unused."},
			[]string{"agent", "tool", "access"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lush_build_info",
			Help: "The build this replica serves (value 1): during a rollout, count replicas by revision."}, []string{"revision"}),
		BuildLoaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lush_build_loaded_timestamp_seconds",
			Help: "When the build this replica serves was swapped in (Unix time)."}),
		BundleRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_bundle_refused_total",
			Help: "Builds refused (the last good one kept serving), by reason (unreadable, manifest_missing, manifest_mismatch, signature, compile)."},
			[]string{"reason"}),
		BundleFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "lush_bundle_download_failures_total",
			Help: "Polls of the bundle server (LUSH_BUNDLE_SERVICE) that failed: unreachable, or an HTTP error."}),
		Invocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_agent_invocations_total",
			Help: "Agent invocations, by agent and status (ok, error, timeout, cancelled, max_turns, denied)."}, []string{"agent", "status"}),
		InvocationLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lush_agent_invocation_duration_seconds",
			Help: "Wall-clock time of agent invocations.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"agent"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_agent_tokens_total",
			Help: "Model tokens used by agent invocations, by agent, model and kind (input, output)."}, []string{"agent", "model", "kind"}),
		LoopFirings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_loop_firings_total",
			Help: "Loop firings that ended, by loop and status (succeeded, failed, timed_out, denied, skipped)."}, []string{"loop", "status"}),
		LoopLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lush_loop_firing_lag_seconds",
			Help:    "Time from a firing's scheduled instant to the start of its run.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300}}),
		Approvals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_approvals_total",
			Help: "Approvals of calls that waited for a person, by event (requested, approved, denied, expired, pending: the wait ended undecided, consumed: already used, notified and notify_failed: the approvals.notify webhook)."},
			[]string{"event"}),
		AgentToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_agent_tool_calls_total",
			Help: "Tool calls agents made, by agent and status (ok, error, denied, stubbed, unknown_tool)."}, []string{"agent", "status"}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lush_authentication_failures_total",
			Help: "Requests refused for their credentials (401, and 403 for a delegation token used for another agent), by the method tried " +
				"(jwt, apikey, proxy, delegation, envoy_jwt, spiffe; none: no credential; unknown: malformed or ambiguous) and reason " +
				"(the error code: missing_credentials, invalid_request, invalid_token, expired_token, unknown_api_key, untrusted_proxy, forbidden_agent; other)."},
			[]string{"method", "reason"}),
	}
	r.MustRegister(m.Decisions, m.Stubs, m.DecisionLatency, m.UpstreamLatency, m.LogWriteFailures,
		m.UpstreamRestarts, m.UpstreamUp, m.Reloads, m.Revision, m.DeclaredTools, m.BuildInfo, m.BuildLoaded, m.BundleRefused, m.BundleFailures, m.Invocations, m.InvocationLatency, m.Tokens, m.AgentToolCalls,
		m.LoopFirings, m.LoopLag, m.Approvals, m.AuthFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// DeclaredTool is one entry of an agent's allowlist in the served build.
type DeclaredTool struct{ Agent, Tool, Access string }

// SetDeclaredTools replaces the declared tools with those of the build being served.
func (m *Metrics) SetDeclaredTools(tools []DeclaredTool) {
	m.DeclaredTools.Reset()
	for _, t := range tools {
		m.DeclaredTools.WithLabelValues(t.Agent, t.Tool, t.Access).Set(1)
	}
}

// SetRevision records the revision being served.
func (m *Metrics) SetRevision(rev string) {
	m.Revision.Reset()
	m.Revision.WithLabelValues(rev).Set(1)
	m.BuildInfo.Reset()
	m.BuildInfo.WithLabelValues(rev).Set(1)
	m.BuildLoaded.SetToCurrentTime()
}
