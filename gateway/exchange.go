package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/lush-agents/lush/internal/mcphttp"
	"github.com/lush-agents/lush/internal/upstream"
)

// Exchanges bridge a 2026-07-28 client and an upstream that asks the old way (a server request
// during the call, before 2026-07-28). A 2026-07-28 client cannot be asked during a call: it is
// answered input_required and sends the call again with the answers. So the upstream call goes on
// in an exchange, on this replica, while the client is answered input_required with the
// upstream's pending requests (each decided first) and a requestState naming the exchange; the
// retry, decided again as a call, hands the answers to the waiting requests and waits for the
// next question or the result. The requestState is signed by the gateway and bound to the
// principal, the exchange and the decision that issued it; it expires with the exchange.
//
// An exchange lives at most exchangeTTL; the replica holds at most maxExchanges, each with at
// most maxInputRequests questions waiting. Its upstream call runs in a goroutine the exchanges
// own, stopped by Close.

// Bounds of the exchanges of a replica.
const (
	maxExchanges = 256
	exchangeTTL  = 10 * time.Minute
)

// statePrefix prefixes the requestState of the gateway's exchanges.
const statePrefix = "lush-x1."

// errNoExchange answers a requestState the gateway cannot use: forged, tampered with, issued to
// someone else, expired, or of an exchange this replica does not hold. The client is told no
// more than that.
var errNoExchange = mcphttp.Errorf(mcphttp.CodeInvalidParams, "requestState is not one this gateway issued to you for this call, or it expired, or it belongs to another replica: call again without requestState and inputResponses")

// exchanges holds a replica's exchanges.
type exchanges struct {
	states stateSigner // signs requestState
	ttl    time.Duration
	max    int
	now    func() time.Time

	ctx  context.Context // ends with Close
	stop context.CancelFunc
	wg   sync.WaitGroup // the exchanges' goroutines

	mu   sync.Mutex
	byID map[string]*exchange
}

func newExchanges(sessionKey []byte) *exchanges {
	ctx, stop := context.WithCancel(context.Background())
	return &exchanges{states: newStateSigner(sessionKey, "lush/exchange-state/v1"), ttl: exchangeTTL, max: maxExchanges, now: time.Now, ctx: ctx, stop: stop, byID: map[string]*exchange{}}
}

// Close ends every exchange (cancelling its upstream call) and waits for their goroutines.
func (xs *exchanges) Close() {
	xs.stop()
	xs.wg.Wait()
}

// exchange is one upstream call held for a 2026-07-28 client.
type exchange struct {
	id        string
	principal string // digest of the caller's principal
	call      string // what the call is: the retry must be the same call
	expires   time.Time

	asked  chan struct{} // a question arrived (buffered 1)
	done   chan struct{} // the upstream call ended: result and err are set
	result json.RawMessage
	err    error
	picked chan struct{} // the result was handed to a request (closed once, by pick)
	pick   sync.Once

	mu       sync.Mutex
	sc       *serverCall             // the request waiting on the exchange, or the last one
	issuedBy string                  // the decision whose answer carries the current requestState
	pending  map[string]*exchangeAsk // questions asked, not answered
	busy     bool                    // a request waits on the exchange
}

// exchangeAsk is a question of the upstream waiting for the client's answer.
type exchangeAsk struct {
	method string
	params json.RawMessage
	answer chan json.RawMessage // buffered 1
}

// callIdentity names a call so that a retry can be told from another call: the method, the
// server, the name and a digest of the arguments.
func callIdentity(sc *serverCall, method string, params json.RawMessage) string {
	var p struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	json.Unmarshal(params, &p)
	sum := sha256.Sum256(p.Arguments)
	return method + "\x00" + sc.ref + "\x00" + sc.name + "\x00" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// retryInput is what a 2026-07-28 retry carries.
type retryInput struct {
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
	RequestState   string                     `json:"requestState"`
}

// run serves a call of a 2026-07-28 client. An upstream of 2026-07-28 gets the call as it is, and
// its input_required result passes through once each of its requests is decided. An older
// upstream's call runs in an exchange; a retry with the gateway's requestState continues it.
func (xs *exchanges) run(ctx context.Context, sc *serverCall, srv *upstream.Server, method string, params json.RawMessage, token string, notify upstream.Notify) (json.RawMessage, error) {
	var in retryInput
	if err := json.Unmarshal(params, &in); err != nil {
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidParams, "inputResponses must be an object of results and requestState a string")
	}
	if strings.HasPrefix(in.RequestState, statePrefix) {
		ex, err := xs.resume(sc, method, params, in)
		if err != nil {
			return nil, err
		}
		return xs.wait(ctx, ex, sc)
	}
	if mcp.IsModernProtocol(srv.Protocol()) {
		res, err := srv.Request(ctx, method, params, token, notify)
		if err != nil {
			return nil, err
		}
		if r, ok := needsInput(res); ok {
			return sc.decideInputs(ctx, res, r)
		}
		return res, nil
	}
	ex, err := xs.start(sc, callIdentity(sc, method, params), notify, func(ctx context.Context, relay upstream.Notify) (json.RawMessage, error) {
		return srv.Request(ctx, method, params, token, relay)
	})
	if err != nil {
		return nil, err
	}
	return xs.wait(ctx, ex, sc)
}

// start runs an upstream call (run, given its context and what to relay its notifications to) in
// a new exchange for the request of sc; call names the call (callIdentity); notify, when not nil,
// takes the call's notifications for the request that started it.
func (xs *exchanges) start(sc *serverCall, call string, notify upstream.Notify, run func(context.Context, upstream.Notify) (json.RawMessage, error)) (*exchange, error) {
	ex := &exchange{id: randomID(), principal: mcphttp.PrincipalDigest(sc.c.caller.ID), call: call,
		expires: xs.now().Add(xs.ttl), asked: make(chan struct{}, 1), done: make(chan struct{}), picked: make(chan struct{}),
		sc: sc, pending: map[string]*exchangeAsk{}, busy: true}
	xs.mu.Lock()
	if xs.ctx.Err() != nil {
		xs.mu.Unlock()
		return nil, errors.New("the gateway is stopping")
	}
	if len(xs.byID) >= xs.max {
		xs.mu.Unlock()
		return nil, fmt.Errorf("this replica holds the most calls waiting for their clients' input it may (%d): try again later", xs.max)
	}
	xs.byID[ex.id] = ex
	xs.wg.Add(1)
	xs.mu.Unlock()

	ctx, cancel := context.WithDeadline(xs.ctx, ex.expires)
	ctx = upstream.WithAsker(ctx, ex.asker(ctx))
	go func() {
		defer xs.wg.Done()
		defer cancel()
		defer func() {
			xs.mu.Lock()
			delete(xs.byID, ex.id)
			xs.mu.Unlock()
		}()
		// Progress and log messages reach the client while the request that started the call
		// waits on it; the retries carry none (their requests end at the next question).
		var relay upstream.Notify
		if notify != nil {
			relay = func(m string, p json.RawMessage) {
				ex.mu.Lock()
				first := ex.sc == sc && ex.busy
				ex.mu.Unlock()
				if first {
					notify(m, p)
				}
			}
		}
		ex.result, ex.err = run(ctx, relay)
		close(ex.done)
		select { // keep the result until a request takes it, or the exchange expires
		case <-ex.picked:
		case <-ctx.Done():
		}
	}()
	return ex, nil
}

// asker answers the upstream's requests during an exchange: each is decided with the request
// waiting on the exchange, then waits for the client's answer in a retry.
func (ex *exchange) asker(ctx context.Context) upstream.Asker {
	return func(askCtx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		ex.mu.Lock()
		sc := ex.sc
		ex.mu.Unlock()
		v, err := sc.decide(askCtx, method, params)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		q := &exchangeAsk{method: method, params: params, answer: make(chan json.RawMessage, 1)}
		id := randomID()
		ex.mu.Lock()
		if len(ex.pending) >= maxInputRequests {
			ex.mu.Unlock()
			err := fmt.Errorf("%s: the server has %d requests waiting for this client already", method, maxInputRequests)
			complete(v, err, 0)
			return nil, &upstream.RPCError{Code: codeServerRequestFailed, Message: err.Error()}
		}
		ex.pending[id] = q
		ex.mu.Unlock()
		select {
		case ex.asked <- struct{}{}:
		default: // a signal is already waiting
		}
		select {
		case res := <-q.answer:
			complete(v, nil, time.Since(start))
			return res, nil
		case <-askCtx.Done():
			err = askCtx.Err()
		case <-ctx.Done():
			err = fmt.Errorf("no answer before the exchange ended: %w", ctx.Err())
		}
		ex.mu.Lock()
		delete(ex.pending, id)
		ex.mu.Unlock()
		complete(v, err, time.Since(start))
		return nil, &upstream.RPCError{Code: codeServerRequestFailed, Message: method + ": " + err.Error()}
	}
}

// resume finds the exchange a retry's requestState names, checks that the retry is the same
// call by the same principal, and hands the answers to the questions they answer.
func (xs *exchanges) resume(sc *serverCall, method string, params json.RawMessage, in retryInput) (*exchange, error) {
	st, ok := xs.verify(in.RequestState)
	if !ok || st.Principal != mcphttp.PrincipalDigest(sc.c.caller.ID) {
		return nil, errNoExchange
	}
	xs.mu.Lock()
	ex := xs.byID[st.Exchange]
	xs.mu.Unlock()
	if ex == nil || ex.principal != st.Principal || ex.call != callIdentity(sc, method, params) {
		return nil, errNoExchange
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	switch {
	case ex.issuedBy != st.Decision:
		return nil, errNoExchange // an older requestState of the exchange
	case ex.busy:
		return nil, mcphttp.Errorf(mcphttp.CodeInvalidRequest, "another request continues this call already: wait for its answer")
	}
	for id, res := range in.InputResponses {
		if q, ok := ex.pending[id]; ok {
			delete(ex.pending, id)
			q.answer <- res // buffered; each question is answered once
		}
	}
	ex.sc, ex.busy = sc, true
	return ex, nil
}

// wait waits, for the request of sc, for the exchange's result or its next questions.
func (xs *exchanges) wait(ctx context.Context, ex *exchange, sc *serverCall) (json.RawMessage, error) {
	defer func() {
		ex.mu.Lock()
		ex.busy = false
		ex.mu.Unlock()
	}()
	for {
		if r, ok := ex.questions(xs, sc); ok {
			return r, nil
		}
		select {
		case <-ex.done:
			ex.pick.Do(func() { close(ex.picked) })
			return ex.result, ex.err
		case <-ex.asked:
		case <-ctx.Done():
			return nil, ctx.Err() // the exchange lives on: the client may send the call again
		}
	}
}

// questions returns the input_required result asking the client the exchange's pending
// questions, when there are any.
func (ex *exchange) questions(xs *exchanges, sc *serverCall) (json.RawMessage, bool) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.pending) == 0 {
		return nil, false
	}
	reqs := make(map[string]inputRequest, len(ex.pending))
	for id, q := range ex.pending {
		reqs[id] = inputRequest{Method: q.method, Params: q.params}
	}
	ex.issuedBy = sc.id
	state := xs.sign(requestState{Exchange: ex.id, Principal: ex.principal, Decision: sc.id, Expires: ex.expires.Unix()})
	out, err := json.Marshal(map[string]any{"resultType": "input_required", "inputRequests": reqs, "requestState": state})
	return out, err == nil
}

// requestState is what the gateway's requestState carries (signed, not encrypted: it holds no
// secret).
type requestState struct {
	Exchange  string `json:"x"`
	Principal string `json:"p"` // digest
	Decision  string `json:"d"` // the decision of the request answered with it
	Expires   int64  `json:"e"` // unix seconds
}

func (xs *exchanges) sign(st requestState) string { return xs.states.sign(statePrefix, st) }

// verify checks a requestState's signature and expiry.
func (xs *exchanges) verify(s string) (requestState, bool) {
	var st requestState
	if xs.states.open(statePrefix, s, &st) != nil || xs.now().Unix() >= st.Expires {
		return st, false
	}
	return st, true
}

func randomID() string {
	b := make([]byte, 18)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
