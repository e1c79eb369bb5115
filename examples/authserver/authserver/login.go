package authserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The login and consent app: Hydra redirects the browser (here an http.Client) to /login and
// /consent with a challenge; the app reads the request from Hydra's admin API, accepts or rejects
// it there, and redirects to where Hydra says.

// loginRequest is the part of Hydra's login request the app reads.
type loginRequest struct {
	Skip        bool   `json:"skip"`
	Subject     string `json:"subject"`
	OIDCContext struct {
		LoginHint string `json:"login_hint"`
	} `json:"oidc_context"`
}

// consentRequest is the part of Hydra's consent request the app reads.
type consentRequest struct {
	Subject                      string   `json:"subject"`
	RequestedScope               []string `json:"requested_scope"`
	RequestedAccessTokenAudience []string `json:"requested_access_token_audience"`
	RequestURL                   string   `json:"request_url"`
	Client                       struct {
		ClientID string   `json:"client_id"`
		Audience []string `json:"audience"`
	} `json:"client"`
}

// redirect is Hydra's answer to an accept or reject.
type redirect struct {
	RedirectTo string `json:"redirect_to"`
}

// maxChallenge bounds a login or consent challenge.
const maxChallenge = 4096

func (s *Server) loginHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", s.handleLogin)
	mux.HandleFunc("GET /consent", s.handleConsent)
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		http.Error(w, fmt.Sprintf("authorization failed: %s: %s", q.Get("error"), q.Get("error_description")), http.StatusBadRequest)
	})
	return mux
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("login_challenge")
	if challenge == "" || len(challenge) > maxChallenge {
		http.Error(w, "login_challenge: missing or too long", http.StatusBadRequest)
		return
	}
	q := url.Values{"login_challenge": {challenge}}
	var req loginRequest
	if err := s.adminJSON(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/login?"+q.Encode(), nil, &req); err != nil {
		s.fail(w, "read the login request", err)
		return
	}
	subject := req.Subject
	if !req.Skip {
		subject = s.chooseUser(req.OIDCContext.LoginHint)
	}
	var to redirect
	body := map[string]any{"subject": subject, "remember": false}
	if err := s.adminJSON(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/login/accept?"+q.Encode(), body, &to); err != nil {
		s.fail(w, "accept the login", err)
		return
	}
	http.Redirect(w, r, to.RedirectTo, http.StatusFound)
}

// chooseUser is the user a login_hint names, or the next user.
func (s *Server) chooseUser(hint string) string {
	if _, ok := s.users[hint]; ok {
		return hint
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextUser
}

func (s *Server) handleConsent(w http.ResponseWriter, r *http.Request) {
	challenge := r.URL.Query().Get("consent_challenge")
	if challenge == "" || len(challenge) > maxChallenge {
		http.Error(w, "consent_challenge: missing or too long", http.StatusBadRequest)
		return
	}
	q := url.Values{"consent_challenge": {challenge}}
	var req consentRequest
	if err := s.adminJSON(r.Context(), http.MethodGet, "/admin/oauth2/auth/requests/consent?"+q.Encode(), nil, &req); err != nil {
		s.fail(w, "read the consent request", err)
		return
	}
	user, known := s.users[req.Subject]
	audience, badResource := consentAudience(req)
	var reject map[string]any
	switch {
	case !known:
		reject = map[string]any{"error": "access_denied", "error_description": "the user is not configured"}
	case user.DenyConsent:
		reject = map[string]any{"error": "access_denied", "error_description": "the user denied consent"}
	case badResource != "":
		reject = map[string]any{"error": "invalid_target", "error_description": fmt.Sprintf("resource %q is not an audience client %q may ask for", badResource, req.Client.ClientID)}
	}
	var to redirect
	if reject != nil {
		if err := s.adminJSON(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/reject?"+q.Encode(), reject, &to); err != nil {
			s.fail(w, "reject the consent", err)
			return
		}
		http.Redirect(w, r, to.RedirectTo, http.StatusFound)
		return
	}
	claims := map[string]any{"email": user.Email, "groups": nonNil(user.Groups)}
	body := map[string]any{
		"grant_scope":                 nonNil(req.RequestedScope),
		"grant_access_token_audience": audience,
		"remember":                    false,
		"session":                     map[string]any{"access_token": claims, "id_token": claims},
	}
	if err := s.adminJSON(r.Context(), http.MethodPut, "/admin/oauth2/auth/requests/consent/accept?"+q.Encode(), body, &to); err != nil {
		s.fail(w, "accept the consent", err)
		return
	}
	http.Redirect(w, r, to.RedirectTo, http.StatusFound)
}

// consentAudience is the audience a consent grants: the requested audience (Hydra checked it)
// and the RFC 8707 resource and audience parameters of the original authorization request, each
// of which must be one of the client's allowed audiences. It returns the first that is not.
func consentAudience(req consentRequest) (audience []string, badResource string) {
	audience = nonNil(slices.Clone(req.RequestedAccessTokenAudience))
	if u, err := url.Parse(req.RequestURL); err == nil {
		q := u.Query()
		extra := append(slices.Clone(q["resource"]), strings.Fields(strings.Join(q["audience"], " "))...)
		for _, a := range extra {
			if !slices.Contains(req.Client.Audience, a) {
				return nil, a
			}
			if !slices.Contains(audience, a) {
				audience = append(audience, a)
			}
		}
	}
	return audience, ""
}

// fail answers a failed admin call; the challenge is not shown.
func (s *Server) fail(w http.ResponseWriter, doing string, err error) {
	s.logger.Error("authserver: login app: "+doing, "err", err)
	http.Error(w, "login app: could not "+doing+": "+err.Error(), http.StatusBadGateway)
}

// adminJSON calls Hydra's admin API with a JSON body (nil for none) and decodes a 2xx answer into
// out (nil to ignore it).
func (s *Server) adminJSON(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.hydra.adminURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.admin.Do(req)
	if err != nil {
		return fmt.Errorf("hydra admin %s %s: %w", method, pathOnly(path), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("hydra admin %s %s: %w", method, pathOnly(path), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("hydra admin %s %s: %s: %s", method, pathOnly(path), resp.Status, hydraError(data))
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("hydra admin %s %s: decode the answer: %w", method, pathOnly(path), err)
	}
	return nil
}

// pathOnly drops the query (a challenge) from an admin path for errors.
func pathOnly(p string) string {
	path, _, _ := strings.Cut(p, "?")
	return path
}

// hydraError is the message of Hydra's JSON error answer, or the start of the body.
func hydraError(data []byte) string {
	var e struct {
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
		ErrorHint        string `json:"error_hint"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		msg := e.Error
		if e.ErrorDescription != "" {
			msg += ": " + e.ErrorDescription
		}
		if e.ErrorHint != "" && !strings.Contains(msg, e.ErrorHint) {
			msg += " " + e.ErrorHint
		}
		return msg
	}
	if len(data) > 200 {
		data = data[:200]
	}
	return string(data)
}

// nonNil turns a nil slice into an empty one (JSON [] rather than null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
