package authserver

import (
	"fmt"
	"net/url"
	"slices"
	"sync"
)

// resourceList is the allowed resources: the configured ones, and those AllowResources adds
// (a test learns its gateway's URL only after the authorization servers are up).
type resourceList struct {
	mu   sync.Mutex
	urls []string
}

func (l *resourceList) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.urls)
}

func (l *resourceList) contains(u string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.urls, u)
}

func (l *resourceList) add(urls ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range urls {
		if !slices.Contains(l.urls, u) {
			l.urls = append(l.urls, u)
		}
	}
}

// checkResource checks that r is an RFC 8707 resource: an absolute URL without a fragment.
func checkResource(r string) error {
	u, err := url.Parse(r)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("%q is not an absolute URL without a fragment (RFC 8707)", r)
	}
	return nil
}

// AllowResources adds resources clients may ask tokens for, from now on: clients registered
// dynamically afterwards may ask for them, and the exchange server issues tokens for them.
// Clients created before keep their audiences.
func (s *Server) AllowResources(resources ...string) error {
	for i, r := range resources {
		if err := checkResource(r); err != nil {
			return fmt.Errorf("allow resources: [%d]: %w", i, err)
		}
	}
	s.resources.add(resources...)
	return nil
}
