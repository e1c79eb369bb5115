package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lush-agents/lush/policies/decisionlog"
)

// NotifyConfig says where to tell people that a call waits for their approval.
type NotifyConfig struct {
	// URL receives a POST for each new approval request: a JSON object with "text" (a line a
	// chat webhook, such as Slack's or Mattermost's, shows as is) and "approval" (its id, the
	// principal, agent and tool, the policy's reasons, when it was asked and when it expires; no
	// arguments). The URL often holds a secret (a webhook token): it is never logged.
	URL string `yaml:"url"`
	// Timeout bounds each POST (default 5s).
	Timeout time.Duration `yaml:"timeout"`
}

func (c NotifyConfig) validate() error {
	if c.URL == "" {
		return nil
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("approvals.notify.url: give an http:// or https:// URL (a chat webhook, say)")
	}
	if c.Timeout < 0 {
		return errors.New("approvals.notify.timeout: must not be negative")
	}
	return nil
}

// notifyQueue bounds the requests waiting to be sent; more are dropped (and logged).
const notifyQueue = 256

// Notifier sends approval requests to a webhook, one at a time, off the path of the calls that
// wait: Notify never blocks. Create it with NewNotifier and stop it with Close. A nil *Notifier
// (no URL configured) does nothing.
type Notifier struct {
	cfg    NotifyConfig
	client *http.Client
	log    *slog.Logger
	result func(ok bool) // optional: counts deliveries

	queue  chan decisionlog.Approval
	stop   context.CancelFunc
	ctx    context.Context
	done   chan struct{}
	mu     sync.Mutex // guards closed against Notify
	closed bool
}

// NewNotifier starts a notifier for cfg, or returns nil when cfg has no URL. result, when set,
// is told whether each request was delivered.
func NewNotifier(cfg NotifyConfig, logger *slog.Logger, result func(ok bool)) *Notifier {
	if cfg.URL == "" {
		return nil
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout}, log: logger, result: result,
		queue: make(chan decisionlog.Approval, notifyQueue), done: make(chan struct{})}
	n.ctx, n.stop = context.WithCancel(context.Background())
	go n.run()
	return n
}

// Notify queues ap to be sent.
func (n *Notifier) Notify(ap decisionlog.Approval) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	select {
	case n.queue <- ap:
	default:
		n.log.Warn("approvals: notification dropped: too many waiting to be sent", "approval", ap.ID)
		n.report(false)
	}
}

// Close stops the notifier: requests still queued are sent while ctx lasts, then dropped.
func (n *Notifier) Close(ctx context.Context) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue)
	}
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		n.stop()
		<-n.done
	}
}

func (n *Notifier) run() {
	defer close(n.done)
	defer n.stop()
	for ap := range n.queue {
		err := n.send(ap)
		if err != nil {
			n.log.Warn("approvals: notification not delivered", "approval", ap.ID, "error", err)
		}
		n.report(err == nil)
	}
}

func (n *Notifier) report(ok bool) {
	if n.result != nil {
		n.result(ok)
	}
}

// send POSTs one request. Its errors never hold the URL.
func (n *Notifier) send(ap decisionlog.Approval) error {
	body, err := json.Marshal(Message(ap))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(n.ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("the notify URL is not valid")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error's text holds the URL
		}
		return fmt.Errorf("post to the webhook: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}

// Message is what a notifier posts about ap.
func Message(ap decisionlog.Approval) map[string]any {
	var reasons []struct {
		Rule    string `json:"rule"`
		Message string `json:"message"`
	}
	json.Unmarshal(ap.Reasons, &reasons)
	why := make([]string, 0, len(reasons))
	for _, r := range reasons {
		why = append(why, r.Message)
	}
	text := fmt.Sprintf("Approval needed: %s wants agent %s to call %s (%s). Decide before %s: lushctl approvals show %s",
		ap.Principal, ap.Agent, ToolLabel(ap), strings.Join(why, "; "), ap.Expires.UTC().Format(time.RFC3339), ap.ID)
	return map[string]any{"text": text, "approval": map[string]any{"id": ap.ID, "principal": ap.Principal, "agent": ap.Agent,
		"tool": ap.Tool, "tool_name": ap.ToolName, "reasons": json.RawMessage(ap.Reasons), "created": ap.Created.UTC().Format(time.RFC3339),
		"expires": ap.Expires.UTC().Format(time.RFC3339)}}
}
