// Package bundlesource moves builds between machines as OPA bundles: the manifest travels inside
// the bundle (data.lush.build.manifest), so that a replica needs nothing but the bundle; Source
// polls a bundle server with OPA's bundle service protocol (ETag and If-None-Match, 304,
// jittered polling, optional long polling), or an OCI registry as OPA's OCI downloader does, and
// hands each new bundle over; PublishDir, PublishHTTP and PublishOCI put a build's bundle where a
// bundle server serves it (a directory, an HTTP PUT, or an OCI artifact OPA can pull).
// Why a bundle is refused is named by a Refused error's Reason, the label of
// lush_bundle_refused_total.
package bundlesource

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/lush-agents/lush/internal/manifest"
)

// Where a bundle holds its manifest: data.lush.build.manifest, the manifest's exact JSON text
// (a string, so that its bytes, and so its hash, survive any OPA that loads the bundle).
const (
	dataRoot  = "lush"
	dataBuild = "build"
	dataKey   = "manifest"
)

// ManifestPath is the manifest's path in the bundle's data document, as Rego names it.
const ManifestPath = "data.lush.build.manifest"

// MaxBundleBytes bounds a bundle (each of its files, and the download) read by this package.
const MaxBundleBytes = 256 << 20

// Reasons a bundle is refused (Refused.Reason).
const (
	ReasonUnreadable       = "unreadable"        // not a gzipped tarball OPA can read
	ReasonManifestMissing  = "manifest_missing"  // no data.lush.build.manifest, or not a manifest
	ReasonManifestMismatch = "manifest_mismatch" // the manifest does not hash to the bundle's revision
	ReasonSignature        = "signature"         // unsigned or badly signed, when a key is required
	ReasonCompile          = "compile"           // the policy does not compile or prepare
)

// Refused is why a bundle was not deployed.
type Refused struct {
	Reason string // one of the Reason constants
	Err    error
}

func (r *Refused) Error() string { return r.Reason + ": " + r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

// RefusalReason returns the reason of a Refused error in err's chain ("" when there is none).
func RefusalReason(err error) string {
	var r *Refused
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// Embed puts a manifest's encoded JSON into a bundle's data document (as built by the compiler:
// {"lush": {...}}).
func Embed(data map[string]any, manifestJSON []byte) {
	root, _ := data[dataRoot].(map[string]any)
	if root == nil {
		root = map[string]any{}
		data[dataRoot] = root
	}
	root[dataBuild] = map[string]any{dataKey: string(manifestJSON)}
}

// Unpack reads the manifest a bundle carries and checks it against the bundle's revision (the
// manifest hash). It does not verify the bundle's signature (the deploy does, with the key it
// requires). Its errors are *Refused; with them it returns the bundle's revision when it has one.
func Unpack(raw []byte) (*manifest.Manifest, string, error) {
	b, err := bundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).WithRegoVersion(ast.RegoV1).
		WithSizeLimitBytes(MaxBundleBytes).Read()
	if err != nil {
		return nil, "", &Refused{ReasonUnreadable, fmt.Errorf("read bundle: %w", err)}
	}
	hash := b.Manifest.Revision
	text, ok := manifestText(b.Data)
	if !ok {
		return nil, hash, &Refused{ReasonManifestMissing, fmt.Errorf("bundle %s has no Lush manifest at %s: build it with lushctl build (a bundle of Rego alone cannot be served)",
			orNone(manifest.Short(hash)), ManifestPath)}
	}
	if !manifest.ValidHash(hash) {
		return nil, "", &Refused{ReasonManifestMismatch, fmt.Errorf("bundle revision %q is not a build hash: the bundle was not made by lushctl build", hash)}
	}
	if got := manifest.Hash([]byte(text)); got != hash {
		return nil, hash, &Refused{ReasonManifestMismatch, fmt.Errorf("the bundle's manifest hashes to %s, not to its revision %s: the bundle was altered", manifest.Short(got), manifest.Short(hash))}
	}
	m, err := manifest.Decode([]byte(text), hash)
	if err != nil {
		return nil, hash, &Refused{ReasonManifestMissing, fmt.Errorf("bundle %s: %w", manifest.Short(hash), err)}
	}
	return m, hash, nil
}

// Verify checks a bundle's signature with cfg (the key a replica requires). Its error is a
// *Refused (signature).
func Verify(raw []byte, cfg *bundle.VerificationConfig) error {
	_, err := bundle.NewReader(bytes.NewReader(raw)).WithBundleVerificationConfig(cfg).WithRegoVersion(ast.RegoV1).
		WithSizeLimitBytes(MaxBundleBytes).Read()
	if err != nil {
		return &Refused{ReasonSignature, fmt.Errorf("verify the bundle's signature: %w", err)}
	}
	return nil
}

func manifestText(data map[string]any) (string, bool) {
	root, _ := data[dataRoot].(map[string]any)
	build, _ := root[dataBuild].(map[string]any)
	text, ok := build[dataKey].(string)
	return text, ok && text != ""
}

func orNone(s string) string {
	if s == "" {
		return "(no revision)"
	}
	return s
}
