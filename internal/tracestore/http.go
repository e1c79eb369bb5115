package tracestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Handler serves s's traces as JSON, read-only:
//
//	GET /traces?agent=&principal=&limit=&since=   {"traces": [summary, ...]}, newest first (Store.List)
//	GET /traces/{id}                              the trace with its spans (Store.Get)
//
// agent and principal select exactly; limit is from 1 to MaxLimit (DefaultLimit if absent); since
// is an RFC 3339 time or a positive Go duration counted back from now ("15m": the last fifteen
// minutes). A bad parameter is a 400 {"error": "...", "parameter": "limit"}; an unknown trace is
// a 404 {"error": "..."}.
//
// Handler does no authentication or authorization: the caller mounts it behind its own, since
// traces name principals and carry whatever the spans recorded. It serves the paths /traces and
// /traces/{id} (other paths are a plain 404, other methods a 405); to serve it under a prefix,
// wrap it in http.StripPrefix.
func Handler(s Store) http.Handler {
	h := &handler{store: s, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /traces", h.list)
	mux.HandleFunc("GET /traces/{id}", h.get)
	return mux
}

type handler struct {
	store Store
	now   func() time.Time
}

// apiError is the body of an error response.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"` // the bad query parameter, for a 400
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	f, param, err := h.filter(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error(), Parameter: param})
		return
	}
	traces, err := h.store.List(r.Context(), f)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: err.Error()})
		return
	}
	if traces == nil {
		traces = []Trace{} // "traces": [], not null
	}
	writeJSON(w, http.StatusOK, struct {
		Traces []Trace `json:"traces"`
	}{traces})
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := h.store.Get(r.Context(), id)
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no trace %q", id)})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, apiError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, t)
	}
}

// filter reads the list query's parameters. On error it also returns the bad parameter's name.
func (h *handler) filter(r *http.Request) (Filter, string, error) {
	q := r.URL.Query()
	f := Filter{Agent: q.Get("agent"), Principal: q.Get("principal")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			return f, "limit", fmt.Errorf("query parameter limit must be an integer from 1 to %d, not %q", MaxLimit, v)
		}
		f.Limit = n
	}
	if v := q.Get("since"); v != "" {
		since, err := h.parseSince(v)
		if err != nil {
			return f, "since", fmt.Errorf("query parameter since must be an RFC 3339 time (2006-01-02T15:04:05Z) or a positive duration (15m), not %q", v)
		}
		f.Since = since
	}
	return f, "", nil
}

// parseSince reads since as an RFC 3339 time or as a positive duration before now.
func (h *handler) parseSince(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, err
	}
	if d <= 0 {
		return time.Time{}, errors.New("duration is not positive")
	}
	return h.now().Add(-d), nil
}

// writeJSON writes v as the response body with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		body, _ = json.Marshal(apiError{Error: fmt.Sprintf("encode response: %v", err)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
