package upstream

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/lush-agents/lush/manifest"
)

// Pool keeps one supervised Server per MCP server reference of a manifest.
type Pool struct {
	opts    Options
	mu      sync.Mutex
	servers map[string]*poolEntry
}

type poolEntry struct {
	server *Server
	config []byte // how it was started, to notice changes
}

// NewPool returns an empty pool; opts apply to every server it starts.
func NewPool(opts Options) *Pool { return &Pool{opts: opts, servers: map[string]*poolEntry{}} }

// Sync starts servers the tools name that are not running, restarts those whose start or
// connection settings changed, and stops the rest. Tools that are not MCP servers are ignored.
func (p *Pool) Sync(tools []manifest.Tool) {
	want := map[string]manifest.Tool{}
	for _, t := range tools {
		if t.Stdio != nil || t.Remote != nil {
			want[t.Ref] = t
		}
	}
	var stop []*Server
	p.mu.Lock()
	for ref, e := range p.servers {
		t, keep := want[ref]
		if !keep || !bytes.Equal(e.config, connConfig(t)) {
			stop = append(stop, e.server)
			delete(p.servers, ref)
		}
	}
	for ref, t := range want {
		if _, ok := p.servers[ref]; !ok {
			tool := t
			p.servers[ref] = &poolEntry{server: Start(&tool, p.opts), config: connConfig(t)}
		}
	}
	p.mu.Unlock()
	for _, s := range stop {
		s.Close()
	}
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

// Get returns the server for a reference.
func (p *Pool) Get(ref string) (*Server, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.servers[ref]
	if !ok {
		return nil, false
	}
	return e.server, true
}

// States returns every server's state, by reference.
func (p *Pool) States() map[string]State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]State, len(p.servers))
	for ref, e := range p.servers {
		out[ref] = e.server.State()
	}
	return out
}

// Close stops every server.
func (p *Pool) Close() {
	p.mu.Lock()
	servers := p.servers
	p.servers = map[string]*poolEntry{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); e.server.Close() }()
	}
	wg.Wait()
}
