package audithttp

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lush-agents/lush/internal/tracestore"
	"github.com/lush-agents/lush/policies/decisionlog"
	"github.com/lush-agents/lush/policies/policyhttp"
)

// maxTraceIDLen bounds a trace id (OpenTelemetry's are 32 hex digits).
const maxTraceIDLen = 64

// trace answers GET /audit/traces/{id}: an agent invocation's trace, span by span, from the trace
// store the process keeps (tracestore: `lushctl run`'s in memory, `lushctl serve`'s SQLite), as
// an audit/read decision like every read of the log.
func (s *Server) trace(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > maxTraceIDLen {
		policyhttp.WriteError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the trace id is longer than %d bytes: use the trace_id a decision shows", maxTraceIDLen))
		return
	}
	v := s.authorize(w, r, map[string]any{"route": "GET /audit/traces/{id}", "trace_id": id})
	if v == nil {
		return
	}
	start := time.Now()
	if s.cfg.Traces == nil {
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		policyhttp.WriteError(w, http.StatusNotFound, "no_trace_store", "this server keeps no traces (lushctl run keeps them in memory; lushctl serve with TRACE_BACKEND=sqlite)")
		return
	}
	t, err := s.cfg.Traces.Get(r.Context(), id)
	switch {
	case errors.Is(err, tracestore.ErrNotFound):
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		policyhttp.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no trace %q in this server's trace store", id))
	case err != nil:
		s.cfg.Logger.Error("audit API: the trace store cannot be read", "decision_id", v.ID, "error", err)
		v.Complete(decisionlog.StatusError, time.Since(start), nil, err.Error())
		policyhttp.WriteError(w, http.StatusInternalServerError, "traces_unavailable",
			fmt.Sprintf("the trace store cannot be read (decision %s; the server's log has the cause)", v.ID))
	default:
		v.Complete(decisionlog.StatusOK, time.Since(start), nil, "")
		policyhttp.WriteJSON(w, http.StatusOK, t)
	}
}
