package export

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lush-agents/lush/policies/authz"
	"github.com/lush-agents/lush/policies/decisionlog"
)

// OTLP sends records as OpenTelemetry log records over OTLP/HTTP (protobuf) to endpoint (a
// collector's base URL; the records go to <endpoint>/v1/logs): one log record per decision, in
// the decision's trace, its body the exported event (JSON), its attributes the fields a query
// filters on. headers are added to the request (for a collector's authentication).
func OTLP(ctx context.Context, client *http.Client, endpoint string, headers map[string]string, recs []decisionlog.Record) error {
	logs := make([]*logspb.LogRecord, 0, len(recs))
	for _, e := range events(recs) {
		body, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event %s: %w", e.DecisionID, err)
		}
		sev, text := logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
		switch e.Outcome {
		case authz.OutcomeDeny, authz.OutcomeApproval:
			sev, text = logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN"
		case authz.OutcomeError:
			sev, text = logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
		}
		lr := &logspb.LogRecord{TimeUnixNano: uint64(e.Timestamp.UnixNano()), ObservedTimeUnixNano: uint64(e.Timestamp.UnixNano()),
			SeverityNumber: sev, SeverityText: text, EventName: "lush.decision",
			Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: string(body)}}}
		for _, kv := range [][2]string{{"lush.decision_id", e.DecisionID}, {"lush.outcome", e.Outcome}, {"lush.action", e.Action},
			{"lush.principal", e.Principal}, {"lush.agent", e.Agent}, {"lush.tool", e.Tool}, {"lush.tool.name", e.ToolName},
			{"lush.access", e.Access}, {"lush.revision", e.Revision}, {"lush.enforcement_point", e.Point}, {"lush.environment", e.Environment}} {
			if kv[1] != "" {
				lr.Attributes = append(lr.Attributes, &commonpb.KeyValue{Key: kv[0], Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: kv[1]}}})
			}
		}
		if id, err := hex.DecodeString(e.TraceID); err == nil && len(id) == 16 {
			lr.TraceId = id
		}
		if id, err := hex.DecodeString(e.SpanID); err == nil && len(id) == 8 {
			lr.SpanId = id
		}
		logs = append(logs, lr)
	}
	req := &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name",
			Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "lush"}}}}},
		ScopeLogs: []*logspb.ScopeLogs{{Scope: &commonpb.InstrumentationScope{Name: "lush/decisionlog"}, LogRecords: logs}},
	}}}
	data, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %d log records: %w", len(logs), err)
	}
	url := endpoint + "/v1/logs"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("export to %s: %w", url, err)
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range headers {
		hr.Header.Set(k, v)
	}
	resp, err := client.Do(hr)
	if err != nil {
		return fmt.Errorf("export %d decisions to %s: %w", len(logs), url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("export %d decisions to %s: %s: %s", len(logs), url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
