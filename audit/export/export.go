// Package export sends decision-log records to other systems: to a collector that speaks OPA's
// decision-log HTTP protocol (POST of a gzip-compressed JSON array of events, as OPA's own
// decision-log plugin uploads them), and to a JSON-lines file for an auditor's own tools. An
// exported event is the logged event (OPA's fields and Lush's) with its completion, if any.
package export

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// Event is an exported record: the event's fields, and the completion.
type Event struct {
	decisionlog.Event
	Completion *decisionlog.Completion `json:"completion,omitempty"`
}

func events(recs []decisionlog.Record) []Event {
	out := make([]Event, len(recs))
	for i, r := range recs {
		out[i] = Event{Event: r.Event, Completion: r.Completion}
	}
	return out
}

// OPA uploads records to url as OPA's decision-log plugin does: one POST of a gzip-compressed
// JSON array. token, when set, is sent as a bearer token. A status other than 2xx is an error
// that names it (never the token).
func OPA(ctx context.Context, client *http.Client, url, token string, recs []decisionlog.Record) error {
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	if err := json.NewEncoder(zw).Encode(events(recs)); err != nil {
		return fmt.Errorf("encode %d events: %w", len(recs), err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, &body)
	if err != nil {
		return fmt.Errorf("upload to %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("upload %d events to %s: %w", len(recs), url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("upload %d events to %s: %s: %s", len(recs), url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// JSONLines writes records as one exported event per line.
func JSONLines(w io.Writer, recs []decisionlog.Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, e := range events(recs) {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}
