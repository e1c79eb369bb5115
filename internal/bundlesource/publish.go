package bundlesource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// IsURL reports whether a --to target is an http(s) URL (else it is a directory).
func IsURL(target string) bool {
	u, err := url.Parse(target)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// PublishDir writes a bundle to dir/resource atomically (a temporary file in the same
// directory, then a rename), so that a server reading the directory (a file server, nginx, an
// S3 sync) never serves half a bundle. It returns the file's path.
func PublishDir(dir, resource string, bundle []byte) (string, error) {
	rel := filepath.FromSlash(strings.TrimLeft(resource, "/"))
	if rel == "" || rel == "." || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("resource %q: give a relative path inside the directory, e.g. bundles/app.tar.gz", resource)
	}
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("publish to %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".publish-*")
	if err != nil {
		return "", fmt.Errorf("publish to %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(bundle)
	if err == nil {
		err = tmp.Chmod(0o644) // a build holds no secret; the server often runs as another user
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("publish to %s: %w", path, err)
	}
	return path, nil
}

// PublishHTTP uploads a bundle with an HTTP PUT to target (the bundle's full URL), with a bearer
// token when one is given (read from a file by the caller; never in an error). Any 2xx answer is
// success.
func PublishHTTP(ctx context.Context, client *http.Client, target string, bundle []byte, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target, bytes.NewReader(bundle))
	if err != nil {
		return fmt.Errorf("publish to %s: %w", target, err)
	}
	req.Header.Set("Content-Type", "application/gzip")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		if msg != "" {
			msg = ": " + msg
		}
		return errors.New("publish to " + target + ": the server answered " + resp.Status + msg)
	}
	return nil
}
