package authserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The front: a reverse proxy to Hydra's public port whose URL is the issuer. See the package
// comment for what it changes and why.

// maxFrontBody bounds the token and registration request bodies the front reads, and the
// registration responses it cleans.
const maxFrontBody = 64 << 10

const registerPath = "/oauth2/register"

func (s *Server) frontHandler() (http.Handler, error) {
	target, err := url.Parse(s.hydra.publicURL)
	if err != nil {
		return nil, fmt.Errorf("start the front: %w", err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // Hydra builds no URL from Host (its URLs are configured)
		},
		ModifyResponse: func(resp *http.Response) error {
			if isRegisterPath(resp.Request.URL.Path) {
				return cleanRegistration(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.logger.Error("authserver: front", "path", r.URL.Path, "err", err)
			writeOAuthError(w, http.StatusBadGateway, "server_error", "the authorization server is unreachable")
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/oauth2/token":
			if err := resourceToAudience(r); err != nil {
				writeOAuthError(w, http.StatusBadRequest, "invalid_request", err.Error())
				return
			}
		case r.Method == http.MethodPost && r.URL.Path == registerPath:
			if err := s.registrationAudience(r); err != nil {
				writeOAuthError(w, http.StatusBadRequest, "invalid_client_metadata", err.Error())
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}), nil
}

func isRegisterPath(p string) bool {
	return p == registerPath || strings.HasPrefix(p, registerPath+"/")
}

// resourceToAudience adds each RFC 8707 resource parameter of a token request to Hydra's
// audience parameter.
func resourceToAudience(r *http.Request) error {
	body, err := readBounded(r.Body)
	if err != nil {
		return fmt.Errorf("token request body: %w", err)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fmt.Errorf("token request body: not a form: %w", err)
	}
	if resources := form["resource"]; len(resources) > 0 {
		audience := strings.Fields(strings.Join(form["audience"], " "))
		for _, res := range resources {
			if strings.ContainsAny(res, " \t\n") {
				return fmt.Errorf("resource %q: a resource URI has no spaces", res)
			}
			if !slices.Contains(audience, res) {
				audience = append(audience, res)
			}
		}
		form.Set("audience", strings.Join(audience, " "))
		body = []byte(form.Encode())
	}
	setBody(r, body)
	return nil
}

// registrationAudience sets a dynamic registration's audience to the allowed resources.
func (s *Server) registrationAudience(r *http.Request) error {
	body, err := readBounded(r.Body)
	if err != nil {
		return fmt.Errorf("registration body: %w", err)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(body, &meta); err != nil {
		return fmt.Errorf("registration body: not a JSON object: %w", err)
	}
	aud, err := json.Marshal(nonNil(s.resources.list()))
	if err != nil {
		return err
	}
	meta["audience"] = aud
	body, err = json.Marshal(meta)
	if err != nil {
		return err
	}
	setBody(r, body)
	return nil
}

// cleanRegistration drops the top-level "" and null fields of a registration response.
func cleanRegistration(resp *http.Response) error {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	body, err := readBounded(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("registration response: %w", err)
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(body, &meta) == nil {
		for k, v := range meta {
			if t := string(bytes.TrimSpace(v)); t == `""` || t == "null" {
				delete(meta, k)
			}
		}
		if b, err := json.Marshal(meta); err == nil {
			body = b
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// readBounded reads at most maxFrontBody bytes of body, refusing more.
func readBounded(body io.Reader) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(body, maxFrontBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFrontBody {
		return nil, fmt.Errorf("more than %d bytes", maxFrontBody)
	}
	return b, nil
}

func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}
