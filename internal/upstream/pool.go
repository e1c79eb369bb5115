package upstream

import (
	"bytes"
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/lush-agents/lush/internal/manifest"
)

// DefaultPrivateIdle is how long a private server (see Pool.Private) may go unused before the
// pool stops it.
const DefaultPrivateIdle = 10 * time.Minute

// Credential is what a private connection to a server carries: HTTP headers for a remote server,
// environment variables for a stdio server. Fingerprint identifies the secret without holding it:
// a changed credential gets a new connection.
type Credential struct {
	Fingerprint string
	Headers     map[string]string
	Env         []string // KEY=value
}

// Pool keeps the supervised servers of a manifest: one shared Server per MCP server that needs no
// per-caller credential, and private Servers, one per (server, principal, credential), for calls
// that carry a credential. A private stdio server is a process of its own, so no two principals
// ever share a process that holds a credential.
type Pool struct {
	opts Options
	idle time.Duration

	mu      sync.Mutex
	tools   map[string]manifest.Tool // the MCP servers of the manifest
	servers map[string]*poolEntry    // shared
	private map[privateKey]*poolEntry

	stop chan struct{}
	done chan struct{}
}

type poolEntry struct {
	server *Server
	config []byte    // how it was started, to notice changes
	used   time.Time // private servers: last handed out
}

type privateKey struct{ ref, principal, fingerprint string }

// NewPool returns an empty pool; opts apply to every server it starts. Private servers unused for
// idle (DefaultPrivateIdle when 0) are stopped. Close stops everything.
func NewPool(opts Options, idle time.Duration) *Pool {
	if idle <= 0 {
		idle = DefaultPrivateIdle
	}
	p := &Pool{opts: opts, idle: idle, tools: map[string]manifest.Tool{}, servers: map[string]*poolEntry{},
		private: map[privateKey]*poolEntry{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.reap()
	return p
}

// Sync starts the shared servers of the tools that are not running, restarts those whose start
// or connection settings changed, and stops the rest. Servers in private (by reference) get no
// shared server: every call to them carries a credential. Private servers of servers no longer
// named, or whose settings changed, are stopped. Tools that are not MCP servers are ignored.
func (p *Pool) Sync(tools []manifest.Tool, private map[string]bool) {
	want := map[string]manifest.Tool{}
	for _, t := range tools {
		if t.Stdio != nil || t.Remote != nil {
			want[t.Ref] = t
		}
	}
	var stop []*Server
	p.mu.Lock()
	p.tools = want
	for ref, e := range p.servers {
		t, keep := want[ref]
		if !keep || private[ref] || !bytes.Equal(e.config, connConfig(t)) {
			stop = append(stop, e.server)
			delete(p.servers, ref)
		}
	}
	for k, e := range p.private {
		t, keep := want[k.ref]
		if !keep || !bytes.Equal(e.config, connConfig(t)) {
			stop = append(stop, e.server)
			delete(p.private, k)
		}
	}
	for ref, t := range want {
		if _, ok := p.servers[ref]; !ok && !private[ref] {
			tool := t
			p.servers[ref] = &poolEntry{server: Start(&tool, p.opts), config: connConfig(t)}
		}
	}
	p.mu.Unlock()
	closeAll(stop)
}

// connConfig is the part of a tool that decides how its server is started or reached.
func connConfig(t manifest.Tool) []byte {
	b, _ := json.Marshal(struct {
		S *manifest.Stdio
		R *manifest.Remote
		T int64
	}{t.Stdio, t.Remote, t.TimeoutMS})
	return b
}

// Get returns the shared server for a reference.
func (p *Pool) Get(ref string) (*Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.servers[ref]
	if !ok {
		return nil, false
	}
	return e.server, true
}

// Private returns the server ref as principal with credential c, starting it if needed (a new
// server is still connecting: wait with WaitSettled). It reports false when the manifest names
// no such server.
func (p *Pool) Private(ref, principal string, c Credential) (*Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tools[ref]
	if !ok {
		return nil, false
	}
	k := privateKey{ref, principal, c.Fingerprint}
	if e, ok := p.private[k]; ok {
		e.used = time.Now()
		return e.server, true
	}
	opts := p.opts
	opts.Dial.Headers = maps.Clone(opts.Dial.Headers)
	if opts.Dial.Headers == nil {
		opts.Dial.Headers = map[string]string{}
	}
	maps.Copy(opts.Dial.Headers, c.Headers)
	opts.Dial.Env = append(append([]string(nil), opts.Dial.Env...), c.Env...)
	opts.Label = principal
	e := &poolEntry{server: Start(&t, opts), config: connConfig(t), used: time.Now()}
	p.private[k] = e
	return e.server, true
}

// Lists returns what a server offers: the shared server's lists, or, for a server reached only
// privately, those of the private server that came up last. ok is false when no server for ref
// has ever been up.
func (p *Pool) Lists(ref string) (l Lists, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, shared := p.servers[ref]; shared {
		return e.server.Lists(), e.server.State().Settled
	}
	var since time.Time
	for k, e := range p.private {
		if st := e.server.State(); k.ref == ref && st.Up && st.Since.After(since) {
			l, ok, since = e.server.Lists(), true, st.Since
		}
	}
	return l, ok
}

// States returns every server's state, by reference; a private server's key is
// "<reference> as <principal>".
func (p *Pool) States() map[string]State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]State, len(p.servers)+len(p.private))
	for ref, e := range p.servers {
		out[ref] = e.server.State()
	}
	for k, e := range p.private {
		key := k.ref + " as " + k.principal
		// Two credentials of one principal (one being replaced): show the one that is up.
		if prev, dup := out[key]; !dup || !prev.Up {
			out[key] = e.server.State()
		}
	}
	return out
}

// reap stops private servers that have not been used for p.idle and have no request in flight.
func (p *Pool) reap() {
	defer close(p.done)
	t := time.NewTicker(max(p.idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			var stop []*Server
			p.mu.Lock()
			for k, e := range p.private {
				if now.Sub(e.used) > p.idle && e.server.active.Load() == 0 {
					stop = append(stop, e.server)
					delete(p.private, k)
				}
			}
			p.mu.Unlock()
			closeAll(stop)
		}
	}
}

// Close stops every server.
func (p *Pool) Close() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	var all []*Server
	for _, e := range p.servers {
		all = append(all, e.server)
	}
	for _, e := range p.private {
		all = append(all, e.server)
	}
	p.servers, p.private = map[string]*poolEntry{}, map[privateKey]*poolEntry{}
	p.mu.Unlock()
	closeAll(all)
}

func closeAll(servers []*Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.Close() }()
	}
	wg.Wait()
}
