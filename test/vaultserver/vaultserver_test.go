package vaultserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/lush-agents/lush/test/vaultserver"
)

// Vault's exact permission-denied bodies.
const (
	aclDenied    = "1 error occurred:\n\t* permission denied\n\n"
	invalidToken = "2 errors occurred:\n\t* permission denied\n\t* invalid token\n\n"
)

// wantErr fails unless err is an *api.ResponseError with status and, if msg
// is not empty, an error message containing msg.
func wantErr(t *testing.T, err error, status int, msg string) *api.ResponseError {
	t.Helper()
	var re *api.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("error = %v, want *api.ResponseError with status %d", err, status)
	}
	if re.StatusCode != status {
		t.Fatalf("status = %d (errors %q), want %d", re.StatusCode, re.Errors, status)
	}
	if msg != "" && !slices.ContainsFunc(re.Errors, func(e string) bool { return strings.Contains(e, msg) }) {
		t.Fatalf("errors = %q, want one containing %q", re.Errors, msg)
	}
	return re
}

// wantExactErr fails unless err is an *api.ResponseError with status and
// exactly the error messages msgs.
func wantExactErr(t *testing.T, err error, status int, msgs ...string) {
	t.Helper()
	re := wantErr(t, err, status, "")
	if msgs == nil {
		msgs = []string{}
	}
	if !slices.Equal(re.Errors, msgs) {
		t.Fatalf("errors = %q, want %q", re.Errors, msgs)
	}
}

// rawRead is a GET that reports 404s as errors: Logical().Read turns a 404
// whose body holds only errors into (nil, nil), as it does with real Vault.
func rawRead(ctx context.Context, c *api.Client, path string) error {
	resp, err := c.Logical().ReadRawWithContext(ctx, path)
	if resp != nil {
		_ = resp.Body.Close()
	}
	return err
}

// rawWrite is a PUT of a raw body.
func rawWrite(ctx context.Context, c *api.Client, path string, body []byte) error {
	resp, err := c.Logical().WriteRawWithContext(ctx, path, body)
	if resp != nil {
		_ = resp.Body.Close()
	}
	return err
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a JSON number", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func within(t *testing.T, what string, got, want, slack int64) {
	t.Helper()
	if got < want-slack || got > want+slack {
		t.Fatalf("%s = %d, want %d±%d", what, got, want, slack)
	}
}

func TestHealth(t *testing.T) {
	s := vaultserver.Start(t)
	if !strings.HasPrefix(s.Addr(), "http://127.0.0.1:") {
		t.Fatalf("Addr = %q, want http://127.0.0.1:PORT", s.Addr())
	}
	c := s.Client(t, "")
	h := must[*api.HealthResponse](t)(c.Sys().HealthWithContext(t.Context()))
	if !h.Initialized || h.Sealed || h.Standby || h.Version != vaultserver.Version || h.ServerTimeUTC == 0 {
		t.Fatalf("health = %+v", h)
	}
}

func TestKVv2PutGetAndVersions(t *testing.T) {
	s := vaultserver.Start(t)
	c := s.Client(t, s.RootToken())
	ctx := t.Context()
	kv := c.KVv2("secret")

	p1 := must[*api.KVSecret](t)(kv.Put(ctx, "lush/app", map[string]any{"user": "alice", "n": 1}))
	p2 := must[*api.KVSecret](t)(kv.Put(ctx, "lush/app", map[string]any{"user": "bob"}))
	if p1.VersionMetadata.Version != 1 || p2.VersionMetadata.Version != 2 || p2.VersionMetadata.CreatedTime.IsZero() {
		t.Fatalf("put versions = %+v, %+v", p1.VersionMetadata, p2.VersionMetadata)
	}

	got := must[*api.KVSecret](t)(kv.Get(ctx, "lush/app"))
	if got.Data["user"] != "bob" || got.VersionMetadata.Version != 2 || !got.VersionMetadata.DeletionTime.IsZero() {
		t.Fatalf("Get = %+v %+v", got.Data, got.VersionMetadata)
	}
	v1 := must[*api.KVSecret](t)(kv.GetVersion(ctx, "lush/app", 1))
	if v1.Data["user"] != "alice" || v1.Data["n"] != json.Number("1") {
		t.Fatalf("GetVersion(1) = %+v", v1.Data)
	}

	// The plain Logical().Read shape: data.data and data.metadata.
	sec := must[*api.Secret](t)(c.Logical().ReadWithContext(ctx, "secret/data/lush/app"))
	if sec.LeaseID != "" || sec.Renewable || sec.LeaseDuration != 0 {
		t.Fatalf("KV read has lease fields: %+v", sec)
	}
	data, _ := sec.Data["data"].(map[string]any)
	meta, _ := sec.Data["metadata"].(map[string]any)
	if data["user"] != "bob" {
		t.Fatalf("data.data = %v", sec.Data["data"])
	}
	if num(t, meta["version"]) != 2 || meta["deletion_time"] != "" || meta["destroyed"] != false || meta["custom_metadata"] != nil {
		t.Fatalf("data.metadata = %v", meta)
	}
	if _, err := time.Parse(time.RFC3339Nano, meta["created_time"].(string)); err != nil {
		t.Fatalf("created_time: %v", err)
	}
	old := must[*api.Secret](t)(c.Logical().ReadWithDataWithContext(ctx, "secret/data/lush/app", map[string][]string{"version": {"1"}}))
	if old.Data["data"].(map[string]any)["user"] != "alice" {
		t.Fatalf("?version=1 = %v", old.Data)
	}

	md := must[*api.KVMetadata](t)(kv.GetMetadata(ctx, "lush/app"))
	if md.CurrentVersion != 2 || len(md.Versions) != 2 {
		t.Fatalf("metadata = %+v", md)
	}
	list := must[*api.Secret](t)(c.Logical().ListWithContext(ctx, "secret/metadata/lush"))
	if keys := list.Data["keys"].([]any); len(keys) != 1 || keys[0] != "app" {
		t.Fatalf("list = %v", list.Data)
	}

	// An additional KV v2 mount.
	s2 := vaultserver.Start(t, vaultserver.WithKV2Mount("kv"))
	kv2 := s2.Client(t, s2.RootToken()).KVv2("kv")
	must[*api.KVSecret](t)(kv2.Put(ctx, "x", map[string]any{"k": "v"}))
	if got := must[*api.KVSecret](t)(kv2.Get(ctx, "x")); got.Data["k"] != "v" {
		t.Fatalf("kv/ mount Get = %v", got.Data)
	}
}

func TestKVv2Missing(t *testing.T) {
	s := vaultserver.Start(t)
	c := s.Client(t, s.RootToken())
	ctx := t.Context()
	must[*api.KVSecret](t)(c.KVv2("secret").Put(ctx, "present", map[string]any{"a": "b"}))

	// vault/api turns a 404 {"errors":[]} into (nil, nil) on Logical().Read
	// and List, and into api.ErrSecretNotFound on the KVv2 helpers.
	tests := []struct {
		name string
		run  func() (any, error)
	}{
		{"Logical().Read", func() (any, error) { return c.Logical().ReadWithContext(ctx, "secret/data/absent") }},
		{"Logical().List", func() (any, error) { return c.Logical().ListWithContext(ctx, "secret/metadata/absent") }},
		{"KVv2.Get", func() (any, error) { return c.KVv2("secret").Get(ctx, "absent") }},
		{"KVv2.GetVersion", func() (any, error) { return c.KVv2("secret").GetVersion(ctx, "present", 9) }},
		{"KVv2.GetMetadata", func() (any, error) { return c.KVv2("secret").GetMetadata(ctx, "absent") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.run()
			switch {
			case strings.HasPrefix(tc.name, "Logical"):
				if err != nil || v.(*api.Secret) != nil {
					t.Fatalf("got (%v, %v), want (nil, nil)", v, err)
				}
			case !errors.Is(err, api.ErrSecretNotFound):
				t.Fatalf("error = %v, want api.ErrSecretNotFound", err)
			}
		})
	}
}

func TestKVv2DeleteUndeleteDestroy(t *testing.T) {
	s := vaultserver.Start(t)
	c := s.Client(t, s.RootToken())
	ctx := t.Context()
	kv := c.KVv2("secret")
	must[*api.KVSecret](t)(kv.Put(ctx, "app", map[string]any{"a": "1"}))

	if err := kv.Delete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	// A deleted version is a 404 that still carries metadata; vault/api
	// returns it as a secret with nil data.
	sec := must[*api.Secret](t)(c.Logical().ReadWithContext(ctx, "secret/data/app"))
	if sec == nil || sec.Data["data"] != nil || sec.Data["metadata"].(map[string]any)["deletion_time"] == "" {
		t.Fatalf("read of deleted version = %+v", sec)
	}
	got := must[*api.KVSecret](t)(kv.Get(ctx, "app"))
	if got.Data != nil || got.VersionMetadata.DeletionTime.IsZero() {
		t.Fatalf("Get deleted = %+v %+v", got.Data, got.VersionMetadata)
	}

	if err := kv.Undelete(ctx, "app", []int{1}); err != nil {
		t.Fatal(err)
	}
	if got := must[*api.KVSecret](t)(kv.Get(ctx, "app")); got.Data["a"] != "1" {
		t.Fatalf("Get after undelete = %v", got.Data)
	}
	if err := kv.Destroy(ctx, "app", []int{1}); err != nil {
		t.Fatal(err)
	}
	if got := must[*api.KVSecret](t)(kv.Get(ctx, "app")); got.Data != nil || !got.VersionMetadata.Destroyed {
		t.Fatalf("Get destroyed = %+v %+v", got.Data, got.VersionMetadata)
	}
	if err := kv.DeleteMetadata(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "app"); !errors.Is(err, api.ErrSecretNotFound) {
		t.Fatalf("Get after metadata delete: %v", err)
	}
}

func TestKVv2CheckAndSetAndPatch(t *testing.T) {
	s := vaultserver.Start(t)
	kv := s.Client(t, s.RootToken()).KVv2("secret")
	ctx := t.Context()
	must[*api.KVSecret](t)(kv.Put(ctx, "cas", map[string]any{"a": "1", "b": "2"}, api.WithCheckAndSet(0)))
	_, err := kv.Put(ctx, "cas", map[string]any{"a": "x"}, api.WithCheckAndSet(0))
	wantExactErr(t, err, http.StatusBadRequest, "check-and-set parameter did not match the current version")

	must[*api.KVSecret](t)(kv.Patch(ctx, "cas", map[string]any{"b": "3", "c": "4"}, api.WithMergeMethod(api.KVMergeMethodPatch)))
	got := must[*api.KVSecret](t)(kv.Get(ctx, "cas"))
	if got.VersionMetadata.Version != 2 || got.Data["a"] != "1" || got.Data["b"] != "3" || got.Data["c"] != "4" {
		t.Fatalf("after patch = %v v%d", got.Data, got.VersionMetadata.Version)
	}
}

func TestKVv2InvalidPath(t *testing.T) {
	s := vaultserver.Start(t)
	c := s.Client(t, s.RootToken())
	// KV v1-style paths on a v2 mount: 404 with a warning, which vault/api
	// returns as a secret carrying only the warning.
	sec := must[*api.Secret](t)(c.Logical().ReadWithContext(t.Context(), "secret/app"))
	if sec == nil || len(sec.Warnings) != 1 || !strings.Contains(sec.Warnings[0], "Invalid path for a versioned K/V secrets engine") {
		t.Fatalf("read secret/app = %+v", sec)
	}
}

func TestLookupSelf(t *testing.T) {
	s := vaultserver.Start(t)
	ctx := t.Context()
	tok := s.CreateToken(time.Hour, true, "reader")
	sec := must[*api.Secret](t)(s.Client(t, tok).Auth().Token().LookupSelfWithContext(ctx))

	for _, k := range []string{
		"accessor", "creation_time", "creation_ttl", "display_name", "expire_time", "explicit_max_ttl",
		"id", "issue_time", "meta", "num_uses", "orphan", "path", "policies", "renewable", "ttl",
	} {
		if _, ok := sec.Data[k]; !ok {
			t.Errorf("lookup-self data lacks %q", k)
		}
	}
	d := sec.Data
	if d["id"] != tok || d["accessor"] == "" || d["accessor"] == tok || d["path"] != "auth/token/create" ||
		d["display_name"] != "token" || d["orphan"] != true || d["renewable"] != true || d["meta"] != nil {
		t.Fatalf("lookup-self = %v", d)
	}
	if got := must[[]string](t)(sec.TokenPolicies()); !slices.Equal(got, []string{"default", "reader"}) {
		t.Fatalf("policies = %v", got)
	}
	within(t, "ttl", num(t, d["ttl"]), 3600, 2)
	within(t, "creation_ttl", num(t, d["creation_ttl"]), 3600, 0)
	within(t, "explicit_max_ttl", num(t, d["explicit_max_ttl"]), 0, 0)
	within(t, "num_uses", num(t, d["num_uses"]), 0, 0)
	within(t, "creation_time", num(t, d["creation_time"]), time.Now().Unix(), 5)
	for _, k := range []string{"expire_time", "issue_time"} {
		if _, err := time.Parse(time.RFC3339Nano, d[k].(string)); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}

	root := must[*api.Secret](t)(s.Client(t, s.RootToken()).Auth().Token().LookupSelfWithContext(ctx))
	if root.Data["expire_time"] != nil || num(t, root.Data["ttl"]) != 0 || root.Data["path"] != "auth/token/root" {
		t.Fatalf("root lookup-self = %v", root.Data)
	}
	if got := must[[]string](t)(root.TokenPolicies()); !slices.Equal(got, []string{"root"}) {
		t.Fatalf("root policies = %v", got)
	}
}

func TestRenewSelf(t *testing.T) {
	tests := []struct {
		name      string
		ttl       string
		maxTTL    string
		renewable bool
		advance   time.Duration
		increment int
		wantTTL   int64 // lease_duration
		wantErr   string
		wantWarn  bool
	}{
		{name: "original ttl", ttl: "1h", renewable: true, advance: 30 * time.Minute, wantTTL: 3600},
		{name: "increment", ttl: "1h", renewable: true, advance: 30 * time.Minute, increment: 7200, wantTTL: 7200},
		{name: "capped at explicit max", ttl: "1h", maxTTL: "90m", renewable: true, advance: 45 * time.Minute, increment: 3600, wantTTL: 2700, wantWarn: true},
		{name: "not renewable", ttl: "1h", renewable: false, wantErr: "lease is not renewable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := vaultserver.Start(t)
			ctx := t.Context()
			renewable := tc.renewable
			created := must[*api.Secret](t)(s.Client(t, s.RootToken()).Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{
				Policies: []string{"app"}, TTL: tc.ttl, ExplicitMaxTTL: tc.maxTTL, Renewable: &renewable,
			}))
			c := s.Client(t, created.Auth.ClientToken)
			s.Advance(tc.advance)
			sec, err := c.Auth().Token().RenewSelfWithContext(ctx, tc.increment)
			if tc.wantErr != "" {
				wantExactErr(t, err, http.StatusBadRequest, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sec.Auth == nil || sec.Auth.ClientToken != created.Auth.ClientToken || !sec.Auth.Renewable {
				t.Fatalf("renew auth = %+v", sec.Auth)
			}
			within(t, "lease_duration", int64(sec.Auth.LeaseDuration), tc.wantTTL, 2)
			if hasWarn := len(sec.Warnings) > 0 && strings.Contains(sec.Warnings[0], "exceeded the effective max_ttl"); hasWarn != tc.wantWarn {
				t.Fatalf("warnings = %q, want cap warning %v", sec.Warnings, tc.wantWarn)
			}
			self := must[*api.Secret](t)(c.Auth().Token().LookupSelfWithContext(ctx))
			within(t, "ttl after renew", num(t, self.Data["ttl"]), tc.wantTTL, 2)
		})
	}

	t.Run("root token", func(t *testing.T) {
		s := vaultserver.Start(t)
		_, err := s.Client(t, s.RootToken()).Auth().Token().RenewSelfWithContext(t.Context(), 0)
		wantExactErr(t, err, http.StatusBadRequest, "lease is not renewable")
	})
}

func TestTokenExpiryAndRevocation(t *testing.T) {
	tests := []struct {
		name string
		kill func(t *testing.T, s *vaultserver.Server, tok string)
	}{
		{"expiry", func(t *testing.T, s *vaultserver.Server, _ string) { s.Advance(time.Hour + time.Second) }},
		{"Server.Revoke", func(t *testing.T, s *vaultserver.Server, tok string) { s.Revoke(tok) }},
		{"revoke-self", func(t *testing.T, s *vaultserver.Server, tok string) {
			if err := s.Client(t, tok).Auth().Token().RevokeSelfWithContext(t.Context(), ""); err != nil {
				t.Fatal(err)
			}
		}},
		{"auth/token/revoke", func(t *testing.T, s *vaultserver.Server, tok string) {
			if err := s.Client(t, s.RootToken()).Auth().Token().RevokeTreeWithContext(t.Context(), tok); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := vaultserver.Start(t, vaultserver.WithPolicy("app", map[string][]string{"secret/data/*": {"read"}}))
			ctx := t.Context()
			root := s.Client(t, s.RootToken())
			must[*api.KVSecret](t)(root.KVv2("secret").Put(ctx, "app", map[string]any{"a": "b"}))
			// A root-policy token with a TTL, and a child it creates.
			parent := must[*api.Secret](t)(root.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{Policies: []string{"root"}, TTL: "1h"}))
			tok := parent.Auth.ClientToken
			child := must[*api.Secret](t)(s.Client(t, tok).Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{Policies: []string{"app"}, TTL: "2h"}))
			if child.Auth.Orphan {
				t.Fatal("child token is an orphan")
			}
			childClient := s.Client(t, child.Auth.ClientToken)
			must[*api.KVSecret](t)(childClient.KVv2("secret").Get(ctx, "app"))

			tc.kill(t, s, tok)

			_, err := s.Client(t, tok).Auth().Token().LookupSelfWithContext(ctx)
			wantExactErr(t, err, http.StatusForbidden, invalidToken)
			_, err = childClient.KVv2("secret").Get(ctx, "app")
			wantExactErr(t, err, http.StatusForbidden, invalidToken)
		})
	}
}

func TestTokenCreate(t *testing.T) {
	s := vaultserver.Start(t,
		vaultserver.WithPolicy("reader", map[string][]string{"secret/data/*": {"read"}}),
		vaultserver.WithPolicy("creator", map[string][]string{"auth/token/create": {"update"}}),
	)
	ctx := t.Context()
	root := s.Client(t, s.RootToken())

	sec := must[*api.Secret](t)(root.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{
		Policies: []string{"Reader"}, TTL: "1h", Metadata: map[string]string{"app": "lush"},
	}))
	a := sec.Auth
	if !slices.Equal(a.Policies, []string{"default", "reader"}) || !slices.Equal(a.TokenPolicies, a.Policies) ||
		a.LeaseDuration != 3600 || !a.Renewable || a.Orphan || a.Metadata["app"] != "lush" || a.Accessor == "" {
		t.Fatalf("create auth = %+v", a)
	}

	// Without the default policy a token cannot even look itself up.
	bare := must[*api.Secret](t)(root.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{Policies: []string{"reader"}, NoDefaultPolicy: true}))
	if !slices.Equal(bare.Auth.Policies, []string{"reader"}) || bare.Auth.LeaseDuration != 768*3600 {
		t.Fatalf("no-default auth = %+v", bare.Auth)
	}
	_, err := s.Client(t, bare.Auth.ClientToken).Auth().Token().LookupSelfWithContext(ctx)
	wantExactErr(t, err, http.StatusForbidden, aclDenied)

	creator := s.Client(t, s.CreateToken(time.Hour, true, "creator"))
	tests := []struct {
		name   string
		client *api.Client
		req    *api.TokenCreateRequest
		status int
		msg    string
	}{
		{"subset ok", creator, &api.TokenCreateRequest{Policies: []string{"creator"}}, 0, ""},
		{"inherits parent policies", creator, &api.TokenCreateRequest{}, 0, ""},
		{"not a subset", creator, &api.TokenCreateRequest{Policies: []string{"reader"}}, 400, "child policies must be subset of parent"},
		{"orphan needs sudo", creator, &api.TokenCreateRequest{NoParent: true}, 400, "root or sudo privileges required to create orphan token"},
		{"no create permission", s.Client(t, s.CreateToken(time.Hour, true, "reader")), &api.TokenCreateRequest{}, 403, aclDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sec, err := tc.client.Auth().Token().CreateWithContext(ctx, tc.req)
			if tc.status != 0 {
				wantExactErr(t, err, tc.status, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sec.Auth.Policies, []string{"creator", "default"}) {
				t.Fatalf("policies = %v", sec.Auth.Policies)
			}
		})
	}
}

func TestAppRoleLogin(t *testing.T) {
	s := vaultserver.Start(t,
		vaultserver.WithAppRole("approle", "role-1", "secret-1", 30*time.Minute, "reader"),
		vaultserver.WithPolicy("reader", map[string][]string{"secret/data/lush/*": {"read"}}),
	)
	tests := []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"ok", map[string]any{"role_id": "role-1", "secret_id": "secret-1"}, 0, ""},
		{"wrong secret_id", map[string]any{"role_id": "role-1", "secret_id": "nope"}, 400, "invalid role or secret ID"},
		{"wrong role_id", map[string]any{"role_id": "nope", "secret_id": "secret-1"}, 400, "invalid role or secret ID"},
		{"missing role_id", map[string]any{"secret_id": "secret-1"}, 400, "missing role_id"},
		{"missing secret_id", map[string]any{"role_id": "role-1"}, 400, "missing secret_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := s.Client(t, "")
			sec, err := c.Logical().WriteWithContext(t.Context(), "auth/approle/login", tc.body)
			if tc.status != 0 {
				wantExactErr(t, err, tc.status, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := sec.Auth
			if a == nil || a.ClientToken == "" || a.LeaseDuration != 1800 || !a.Renewable ||
				!slices.Equal(a.Policies, []string{"default", "reader"}) || a.Metadata["role_name"] != "approle" || !a.Orphan {
				t.Fatalf("login auth = %+v", a)
			}
			c.SetToken(a.ClientToken)
			self := must[*api.Secret](t)(c.Auth().Token().LookupSelfWithContext(t.Context()))
			if self.Data["path"] != "auth/approle/login" || self.Data["display_name"] != "approle" {
				t.Fatalf("lookup-self = %v", self.Data)
			}
		})
	}
}

func TestKubernetesLogin(t *testing.T) {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:lush:broker"}`))
	jwt := "eyJhbGciOiJSUzI1NiJ9." + payload + ".c2ln"
	s := vaultserver.Start(t, vaultserver.WithKubernetes("kubernetes", "broker", jwt, time.Hour, "reader"))
	tests := []struct {
		name   string
		body   map[string]any
		status int
		msg    string
	}{
		{"ok", map[string]any{"role": "broker", "jwt": jwt}, 0, ""},
		{"wrong jwt", map[string]any{"role": "broker", "jwt": "eyJ.bad.jwt"}, 403, aclDenied},
		{"unknown role", map[string]any{"role": "nope", "jwt": jwt}, 400, `invalid role name "nope"`},
		{"missing jwt", map[string]any{"role": "broker"}, 400, "missing jwt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := s.Client(t, "")
			sec, err := c.Logical().WriteWithContext(t.Context(), "auth/kubernetes/login", tc.body)
			if tc.status != 0 {
				wantExactErr(t, err, tc.status, tc.msg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := sec.Auth
			if a.LeaseDuration != 3600 || !a.Renewable || !slices.Equal(a.Policies, []string{"default", "reader"}) ||
				a.Metadata["service_account_name"] != "broker" || a.Metadata["role"] != "broker" {
				t.Fatalf("login auth = %+v", a)
			}
			c.SetToken(a.ClientToken)
			self := must[*api.Secret](t)(c.Auth().Token().LookupSelfWithContext(t.Context()))
			if self.Data["display_name"] != "kubernetes-lush-broker" {
				t.Fatalf("display_name = %v", self.Data["display_name"])
			}
		})
	}
}

func TestACL(t *testing.T) {
	s := vaultserver.Start(t,
		vaultserver.WithPolicy("app", map[string][]string{
			"secret/data/lush/*":         {"read"},
			"secret/data/lush/private/*": {"deny"},
			"secret/data/lush/rw":        {"read", "create", "update"},
			"secret/data/+/shared":       {"read"},
			"secret/data/new/*":          {"create"},
			"secret/metadata/lush/*":     {"list"},
		}),
		vaultserver.WithDynamicRole("ro", time.Hour, 0),
	)
	ctx := t.Context()
	root := s.Client(t, s.RootToken())
	for _, p := range []string{"lush/a", "lush/private/key", "other", "team/shared", "lush/rw"} {
		must[*api.KVSecret](t)(root.KVv2("secret").Put(ctx, p, map[string]any{"k": "v"}))
	}
	app := s.Client(t, s.CreateToken(time.Hour, true, "app"))
	write := func(p string) error {
		_, err := app.Logical().WriteWithContext(ctx, p, map[string]any{"data": map[string]any{"k": "w"}})
		return err
	}
	read := func(p string) error { _, err := app.Logical().ReadWithContext(ctx, p); return err }
	tests := []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"glob read", func() error { return read("secret/data/lush/a") }, true},
		{"glob read of missing key", func() error { return read("secret/data/lush/missing") }, true},
		{"more specific deny wins", func() error { return read("secret/data/lush/private/key") }, false},
		{"outside the policy", func() error { return read("secret/data/other") }, false},
		{"plus segment", func() error { return read("secret/data/team/shared") }, true},
		{"plus is one segment only", func() error { return read("secret/data/a/b/shared") }, false},
		{"read-only path refuses writes", func() error { return write("secret/data/lush/a") }, false},
		{"exact rule allows update", func() error { return write("secret/data/lush/rw") }, true},
		{"create allows a new key", func() error { return write("secret/data/new/k") }, true},
		{"create does not allow update", func() error { return write("secret/data/new/k") }, false},
		{"list", func() error { _, err := app.Logical().ListWithContext(ctx, "secret/metadata/lush"); return err }, true},
		{"other engine", func() error { return read("database/creds/ro") }, false},
		{"unknown mount", func() error { return read("nosuch/path") }, false},
		{"lease revoke is not in default", func() error {
			return app.Sys().RevokeWithContext(ctx, "database/creds/ro/x")
		}, false},
	}
	for _, tc := range tests { // in order: "create does not allow update" needs the key created before
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !tc.allowed {
				wantExactErr(t, err, http.StatusForbidden, aclDenied)
				return
			}
			if err != nil {
				t.Fatalf("denied: %v", err)
			}
		})
	}

	err := rawRead(ctx, root, "nosuch/path")
	wantExactErr(t, err, http.StatusNotFound, `no handler for route "nosuch/path". route entry not found.`)
}

func TestNamespace(t *testing.T) {
	s := vaultserver.Start(t,
		vaultserver.WithNamespace("team"),
		vaultserver.WithPolicy("app", map[string][]string{
			"secret/data/*": {"read", "create", "update"}, "database/creds/ro": {"read"},
		}),
		vaultserver.WithAppRole("approle", "role-1", "secret-1", time.Hour, "app"),
		vaultserver.WithDynamicRole("ro", time.Hour, 2*time.Hour),
	)
	ctx := t.Context()
	root := s.Client(t, s.RootToken())
	if root.Namespace() != "team" {
		t.Fatalf("client namespace = %q", root.Namespace())
	}
	must[*api.KVSecret](t)(root.KVv2("secret").Put(ctx, "x", map[string]any{"k": "v"}))

	// A token from an AppRole login inside the namespace.
	login := must[*api.Secret](t)(s.Client(t, "").Logical().WriteWithContext(ctx, "auth/approle/login",
		map[string]any{"role_id": "role-1", "secret_id": "secret-1"}))
	tok := login.Auth.ClientToken
	app := s.Client(t, tok)
	must[*api.KVSecret](t)(app.KVv2("secret").Get(ctx, "x"))

	noNS := s.Client(t, tok)
	noNS.ClearNamespace()
	_, err := noNS.KVv2("secret").Get(ctx, "x")
	wantExactErr(t, err, http.StatusForbidden, aclDenied)
	// The -self endpoints act in the token's own namespace.
	must[*api.Secret](t)(noNS.Auth().Token().LookupSelfWithContext(ctx))
	// The path-prefix form of the namespace.
	if sec := must[*api.Secret](t)(noNS.Logical().ReadWithContext(ctx, "team/secret/data/x")); sec.Data["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("prefix-form read = %v", sec.Data)
	}

	rootNoNS := s.Client(t, s.RootToken())
	rootNoNS.ClearNamespace()
	err = rawRead(ctx, rootNoNS, "secret/data/x")
	wantExactErr(t, err, http.StatusNotFound, `no handler for route "secret/data/x". route entry not found.`)
	other := s.Client(t, s.RootToken())
	other.SetNamespace("other")
	err = rawRead(ctx, other, "secret/data/x")
	wantExactErr(t, err, http.StatusNotFound, `no handler for route "other/secret/data/x". route entry not found.`)
	anonNoNS := s.Client(t, "")
	anonNoNS.ClearNamespace()
	_, err = anonNoNS.Logical().WriteWithContext(ctx, "auth/approle/login",
		map[string]any{"role_id": "role-1", "secret_id": "secret-1"})
	wantExactErr(t, err, http.StatusForbidden, "permission denied")

	// Leases minted in the namespace renew without the header, as in Vault.
	creds := must[*api.Secret](t)(app.Logical().ReadWithContext(ctx, "database/creds/ro"))
	if !strings.HasPrefix(creds.LeaseID, "database/creds/ro/") || strings.Count(creds.LeaseID, ".") != 1 {
		t.Fatalf("lease id = %q", creds.LeaseID)
	}
	must[*api.Secret](t)(noNS.Sys().RenewWithContext(ctx, creds.LeaseID, 60))

	var inNS, outside int
	for _, r := range s.Requests() {
		switch r.Namespace {
		case "team":
			inNS++
		case "":
			outside++
		default:
			t.Fatalf("request in namespace %q", r.Namespace)
		}
	}
	if inNS == 0 || outside == 0 {
		t.Fatalf("namespaces in log: %d in team, %d outside", inNS, outside)
	}
}

func TestDynamicCredentials(t *testing.T) {
	s := vaultserver.Start(t,
		vaultserver.WithDynamicRole("ro", time.Hour, 2*time.Hour),
		vaultserver.WithPolicy("app", map[string][]string{"database/creds/ro": {"read"}, "sys/leases/revoke": {"update"}}),
	)
	ctx := t.Context()
	tok := s.CreateToken(0, true, "app")
	c := s.Client(t, tok)

	read := func() *api.Secret { return must[*api.Secret](t)(c.Logical().ReadWithContext(ctx, "database/creds/ro")) }
	a, b := read(), read()
	for _, sec := range []*api.Secret{a, b} {
		if !strings.HasPrefix(sec.LeaseID, "database/creds/ro/") || !sec.Renewable || sec.LeaseDuration != 3600 ||
			!strings.HasPrefix(sec.Data["username"].(string), "v-ro-") || sec.Data["password"] == "" {
			t.Fatalf("creds = %+v", sec)
		}
		if !s.LeaseValid(sec.LeaseID) {
			t.Fatalf("lease %s not valid", sec.LeaseID)
		}
	}
	if a.LeaseID == b.LeaseID || a.Data["username"] == b.Data["username"] || a.Data["password"] == b.Data["password"] {
		t.Fatal("two reads returned the same credentials")
	}

	s.Advance(30 * time.Minute)
	r := must[*api.Secret](t)(c.Sys().RenewWithContext(ctx, a.LeaseID, 3600))
	if r.LeaseID != a.LeaseID || !r.Renewable || r.LeaseDuration != 3600 || len(r.Warnings) != 0 {
		t.Fatalf("renew = %+v", r)
	}
	s.Advance(50 * time.Minute) // 80m after issue; max TTL 2h leaves 40m
	r = must[*api.Secret](t)(c.Sys().RenewWithContext(ctx, a.LeaseID, 3600))
	within(t, "capped lease_duration", int64(r.LeaseDuration), 2400, 2)
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "exceeded the effective max_ttl") {
		t.Fatalf("warnings = %q", r.Warnings)
	}
	s.Advance(41 * time.Minute) // past max TTL
	if s.LeaseValid(a.LeaseID) {
		t.Fatal("lease valid past its max TTL")
	}
	_, err := c.Sys().RenewWithContext(ctx, a.LeaseID, 60)
	wantExactErr(t, err, http.StatusBadRequest, "lease not found")

	if err := c.Sys().RevokeWithContext(ctx, b.LeaseID); err != nil {
		t.Fatal(err)
	}
	if s.LeaseValid(b.LeaseID) {
		t.Fatal("revoked lease still valid")
	}
	_, err = c.Sys().RenewWithContext(ctx, b.LeaseID, 60)
	wantExactErr(t, err, http.StatusBadRequest, "lease not found")
	_, err = c.Sys().RenewWithContext(ctx, "database/creds/ro/unknown", 60)
	wantExactErr(t, err, http.StatusBadRequest, "lease not found")

	// Revoking the token revokes its leases.
	d := read()
	s.Revoke(tok)
	if s.LeaseValid(d.LeaseID) {
		t.Fatal("lease outlived its token")
	}

	_, err = s.Client(t, s.RootToken()).Logical().ReadWithContext(ctx, "database/creds/nope")
	wantExactErr(t, err, http.StatusBadRequest, "unknown role: nope")
}

func TestSetDown(t *testing.T) {
	s := vaultserver.Start(t, vaultserver.WithAppRole("approle", "r", "s", 0))
	ctx := t.Context()
	c := s.Client(t, s.RootToken())
	must[*api.KVSecret](t)(c.KVv2("secret").Put(ctx, "x", map[string]any{"k": "v"}))

	s.SetDown(true)
	wantErr(t, rawRead(ctx, c, "sys/health"), http.StatusServiceUnavailable, "")
	// api.Sys().Health asks for sealedcode=299, so it reports instead of failing.
	if h := must[*api.HealthResponse](t)(c.Sys().HealthWithContext(ctx)); !h.Sealed {
		t.Fatalf("health while down = %+v", h)
	}
	_, err := c.KVv2("secret").Get(ctx, "x")
	wantExactErr(t, err, http.StatusServiceUnavailable, "Vault is sealed")
	_, err = s.Client(t, "").Logical().WriteWithContext(ctx, "auth/approle/login", map[string]any{"role_id": "r", "secret_id": "s"})
	wantExactErr(t, err, http.StatusServiceUnavailable, "Vault is sealed")

	s.SetDown(false)
	must[*api.KVSecret](t)(c.KVv2("secret").Get(ctx, "x"))
}

func TestClose(t *testing.T) {
	s := vaultserver.Start(t)
	c := s.Client(t, s.RootToken())
	s.Close()
	_, err := c.Logical().ReadWithContext(t.Context(), "secret/data/x")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("error after Close = %v, want connection refused", err)
	}
	var re *api.ResponseError
	if errors.As(err, &re) {
		t.Fatalf("got an HTTP response after Close: %v", re)
	}
}

func TestProtocolErrors(t *testing.T) {
	s := vaultserver.Start(t, vaultserver.WithDynamicRole("ro", time.Hour, 0))
	ctx := t.Context()
	root := s.Client(t, s.RootToken())
	big := fmt.Appendf(nil, `{"data":{"k":%q}}`, strings.Repeat("x", 2<<20))
	tests := []struct {
		name   string
		do     func() error
		status int
		msgs   []string // exact; nil = only the prefix in prefix
		prefix string
	}{
		{"missing token", func() error { _, err := s.Client(t, "").Logical().ReadWithContext(ctx, "secret/data/x"); return err },
			403, []string{"permission denied"}, ""},
		{"unknown token", func() error {
			_, err := s.Client(t, "hvs.nonexistent").Logical().ReadWithContext(ctx, "secret/data/x")
			return err
		}, 403, []string{invalidToken}, ""},
		{"unsupported operation", func() error { _, err := root.Logical().DeleteWithContext(ctx, "database/creds/ro"); return err },
			405, []string{"1 error occurred:\n\t* unsupported operation\n\n"}, ""},
		{"unsupported path in a mount", func() error { return rawRead(ctx, root, "database/config/x") },
			404, []string{"1 error occurred:\n\t* unsupported path\n\n"}, ""},
		{"invalid JSON", func() error { return rawWrite(ctx, root, "secret/data/x", []byte("{")) },
			400, nil, "failed to parse JSON input: "},
		{"body over 1 MiB", func() error { return rawWrite(ctx, root, "secret/data/x", big) },
			413, []string{"failed to parse JSON input: http: request body too large"}, ""},
		{"no data", func() error {
			_, err := root.Logical().WriteWithContext(ctx, "secret/data/x", map[string]any{})
			return err
		},
			400, []string{"no data provided"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.msgs != nil {
				wantExactErr(t, err, tc.status, tc.msgs...)
				return
			}
			wantErr(t, err, tc.status, tc.prefix)
		})
	}

	t.Run("Authorization: Bearer", func(t *testing.T) {
		c := s.Client(t, "")
		c.AddHeader("Authorization", "Bearer "+s.RootToken())
		must[*api.Secret](t)(c.Auth().Token().LookupSelfWithContext(ctx))
	})
}

func TestRequestLogHasNoTokens(t *testing.T) {
	s := vaultserver.Start(t)
	ctx := t.Context()
	tok := s.CreateToken(time.Hour, true)
	c := s.Client(t, tok)
	self := must[*api.Secret](t)(c.Auth().Token().LookupSelfWithContext(ctx))
	_, _ = s.Client(t, "hvs.unknown-token").Auth().Token().LookupSelfWithContext(ctx)

	reqs := s.Requests()
	if len(reqs) != 2 {
		t.Fatalf("logged %d requests, want 2", len(reqs))
	}
	got := reqs[0]
	if got.Method != http.MethodGet || got.Path != "/v1/auth/token/lookup-self" || got.Status != 200 ||
		got.TokenAccessor != self.Data["accessor"] || got.Namespace != "" {
		t.Fatalf("log entry = %+v", got)
	}
	if !strings.HasPrefix(reqs[1].TokenAccessor, "sha256:") || reqs[1].Status != 403 {
		t.Fatalf("unknown-token entry = %+v", reqs[1])
	}
	for _, r := range reqs {
		if entry := fmt.Sprintf("%+v", r); strings.Contains(entry, tok) || strings.Contains(entry, "hvs.unknown-token") {
			t.Fatalf("request log holds a token: %s", entry)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	s := vaultserver.Start(t, vaultserver.WithDynamicRole("ro", time.Hour, 2*time.Hour))
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		c := s.Client(t, s.RootToken())
		wg.Go(func() {
			for j := range 20 {
				path := fmt.Sprintf("w%d/k%d", i, j%3)
				if _, err := c.KVv2("secret").Put(ctx, path, map[string]any{"j": j}); err != nil {
					errs <- err
					return
				}
				if _, err := c.KVv2("secret").Get(ctx, path); err != nil {
					errs <- err
					return
				}
				sec, err := c.Logical().ReadWithContext(ctx, "database/creds/ro")
				if err != nil {
					errs <- err
					return
				}
				if _, err := c.Sys().RenewWithContext(ctx, sec.LeaseID, 60); err != nil {
					errs <- err
					return
				}
				s.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(s.Requests()); n != 8*20*4 {
		t.Fatalf("logged %d requests, want %d", n, 8*20*4)
	}
}

// TestLifetimeWatcher checks that vault/api's LifetimeWatcher, which the
// broker uses to keep its token alive, renews a token against this server.
func TestLifetimeWatcher(t *testing.T) {
	s := vaultserver.Start(t)
	sec := must[*api.Secret](t)(s.Client(t, s.RootToken()).Auth().Token().CreateWithContext(t.Context(),
		&api.TokenCreateRequest{Policies: []string{"app"}, TTL: "2s"}))
	w, err := s.Client(t, sec.Auth.ClientToken).NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w.Start()
	}()
	defer func() {
		w.Stop()
		<-stopped
	}()
	select {
	case r := <-w.RenewCh():
		if r.Secret.Auth == nil || r.Secret.Auth.LeaseDuration != 2 {
			t.Fatalf("renewal = %+v", r.Secret.Auth)
		}
	case err := <-w.DoneCh():
		t.Fatalf("watcher stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal within 10s")
	}
}
