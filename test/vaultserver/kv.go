package vaultserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultMaxVersions is how many versions KV v2 keeps when max_versions is 0.
const defaultMaxVersions = 10

// kvStore is one KV version 2 mount.
type kvStore struct {
	secrets     map[string]*kvSecret
	casRequired bool
	maxVersions int
}

type kvSecret struct {
	versions    map[int]*kvVersion
	current     int
	oldest      int
	created     time.Time
	updated     time.Time
	custom      map[string]string
	maxVersions int
	casRequired bool
}

type kvVersion struct {
	data      json.RawMessage // nil once destroyed
	created   time.Time
	deleted   time.Time // zero unless soft-deleted
	destroyed bool
}

// live reports whether the version's data is readable at now.
func (v *kvVersion) live(now time.Time) bool {
	return !v.destroyed && (v.deleted.IsZero() || v.deleted.After(now))
}

func newKVMount(name string) *mount {
	kv := &kvStore{secrets: map[string]*kvSecret{}}
	return &mount{path: name + "/", typ: "kv", exists: kv.exists, handle: kv.handle}
}

// exists is KV v2's existence check: a data or metadata write is a create
// unless the key has metadata. Other paths have no check (always update).
func (kv *kvStore) exists(_ *state, req *request) bool {
	sub, key, _ := strings.Cut(req.rel, "/")
	if sub == "data" || sub == "metadata" {
		return kv.secrets[key] != nil
	}
	return true
}

func (kv *kvStore) handle(_ *state, req *request) response {
	sub, key, hasKey := strings.Cut(req.rel, "/")
	switch {
	case sub == "data" && hasKey:
		return kv.data(req, key)
	case sub == "metadata" && hasKey:
		return kv.metadata(req, key)
	case (sub == "delete" || sub == "undelete" || sub == "destroy") && hasKey:
		return kv.versionsOp(req, sub, key)
	case req.rel == "config":
		return kv.config(req)
	}
	return kvInvalidPath(req)
}

// kvInvalidPath is KV v2's answer to a KV v1-style path such as secret/foo:
// 404 with a warning, which vault/api returns as a secret with Warnings.
func kvInvalidPath(req *request) response {
	cmd := map[operation]string{
		opRead: "get", opList: "list", opCreate: "put", opUpdate: "put", opDelete: "delete", opPatch: "patch",
	}[req.op]
	warning := fmt.Sprintf("Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv %s' for this operation.", cmd)
	return req.reply(http.StatusNotFound, nil, []string{warning})
}

func (kv *kvStore) data(req *request, key string) response {
	switch req.op {
	case opRead:
		return kv.readData(req, key)
	case opCreate, opUpdate:
		return kv.writeData(req, key, false)
	case opPatch:
		return kv.writeData(req, key, true)
	case opDelete:
		if s := kv.secrets[key]; s != nil {
			if v := s.versions[s.current]; v != nil && v.live(req.now) {
				v.deleted = req.now
				s.updated = req.now
			}
		}
		return noContent()
	}
	return unsupportedOperation()
}

func (kv *kvStore) readData(req *request, key string) response {
	s := kv.secrets[key]
	if s == nil {
		return errorResponse(http.StatusNotFound)
	}
	n := s.current
	if q := req.query.Get("version"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil {
			return badRequest(fieldError("version", q, err).Error())
		}
		if v > 0 {
			n = v
		}
	}
	v := s.versions[n]
	if v == nil {
		return errorResponse(http.StatusNotFound)
	}
	meta := versionMetadata(s, n, v)
	if !v.live(req.now) {
		// Vault answers 404 but still returns the version's metadata.
		return req.reply(http.StatusNotFound, map[string]any{"data": nil, "metadata": meta}, nil)
	}
	return req.reply(http.StatusOK, map[string]any{"data": v.data, "metadata": meta}, nil)
}

// writeData writes a new version: the request's data, or for a patch the
// current version's data merged with it (JSON merge patch, RFC 7386).
func (kv *kvStore) writeData(req *request, key string, patch bool) response {
	raw, ok := req.body["data"]
	if !ok || raw == nil {
		return badRequest("no data provided")
	}
	in, ok := raw.(map[string]any)
	if !ok {
		return badRequest(fieldError("data", raw, fmt.Errorf("expected a map, got %T", raw)).Error())
	}
	s := kv.secrets[key]
	if patch {
		if s == nil || s.versions[s.current] == nil || !s.versions[s.current].live(req.now) {
			return errorResponse(http.StatusNotFound)
		}
		cur, err := decodeObject(s.versions[s.current].data)
		if err != nil {
			return errorResponse(http.StatusInternalServerError, fmt.Sprintf("decoding stored version: %v", err))
		}
		in = mergePatch(cur, in)
	}
	if err := kv.checkCAS(req.body, s); err != nil {
		return badRequest(err.Error())
	}
	data, err := json.Marshal(in)
	if err != nil {
		return badRequest(fmt.Sprintf("encoding data: %v", err))
	}
	if s == nil {
		s = &kvSecret{versions: map[int]*kvVersion{}, created: req.now}
		kv.secrets[key] = s
	}
	s.current++
	v := &kvVersion{data: data, created: req.now}
	s.versions[s.current] = v
	s.updated = req.now
	keep := s.maxVersions
	if keep == 0 {
		keep = kv.maxVersions
	}
	if keep == 0 {
		keep = defaultMaxVersions
	}
	if oldest := s.current - keep + 1; oldest > 1 {
		for n := range s.versions {
			if n < oldest {
				delete(s.versions, n)
			}
		}
		s.oldest = oldest
	}
	return req.reply(http.StatusOK, versionMetadata(s, s.current, v), nil)
}

// checkCAS enforces the check-and-set option: cas must equal the current
// version (0 for a new key).
func (kv *kvStore) checkCAS(body map[string]any, s *kvSecret) error {
	opts, _ := body["options"].(map[string]any)
	_, has := opts["cas"]
	required := kv.casRequired || (s != nil && s.casRequired)
	if !has {
		if required {
			return fmt.Errorf("check-and-set parameter required for this call")
		}
		return nil
	}
	cas, err := intField(opts, "cas")
	if err != nil {
		return err
	}
	current := 0
	if s != nil {
		current = s.current
	}
	if cas != current {
		return fmt.Errorf("check-and-set parameter did not match the current version")
	}
	return nil
}

func (kv *kvStore) metadata(req *request, key string) response {
	switch req.op {
	case opList:
		keys := kv.list(key)
		if len(keys) == 0 {
			return errorResponse(http.StatusNotFound)
		}
		return req.reply(http.StatusOK, map[string]any{"keys": keys}, nil)
	case opRead:
		s := kv.secrets[key]
		if s == nil {
			return errorResponse(http.StatusNotFound)
		}
		return req.reply(http.StatusOK, fullMetadata(s), nil)
	case opCreate, opUpdate:
		maxVersions, err := intField(req.body, "max_versions")
		if err != nil {
			return badRequest(err.Error())
		}
		custom, err := stringMapField(req.body, "custom_metadata")
		if err != nil {
			return badRequest(err.Error())
		}
		s := kv.secrets[key]
		if s == nil {
			s = &kvSecret{versions: map[int]*kvVersion{}, created: req.now}
			kv.secrets[key] = s
		}
		casRequired, err := boolField(req.body, "cas_required", s.casRequired)
		if err != nil {
			return badRequest(err.Error())
		}
		if _, ok := req.body["max_versions"]; ok {
			s.maxVersions = maxVersions
		}
		if _, ok := req.body["custom_metadata"]; ok {
			s.custom = custom
		}
		s.casRequired = casRequired
		s.updated = req.now
		return noContent()
	case opDelete:
		delete(kv.secrets, key)
		return noContent()
	}
	return unsupportedOperation()
}

// list returns the keys and "folders/" directly under prefix.
func (kv *kvStore) list(prefix string) []string {
	seen := map[string]bool{}
	for k := range kv.secrets {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || rest == "" {
			continue
		}
		if i := strings.Index(rest, "/"); i >= 0 {
			rest = rest[:i+1]
		}
		seen[rest] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// versionsOp is delete/, undelete/ and destroy/ with {"versions":[...]}.
func (kv *kvStore) versionsOp(req *request, action, key string) response {
	if !isWrite(req.op) {
		return unsupportedOperation()
	}
	versions, err := intListField(req.body, "versions")
	if err != nil {
		return badRequest(err.Error())
	}
	if len(versions) == 0 {
		return badRequest("no version number provided")
	}
	s := kv.secrets[key]
	if s == nil {
		return noContent()
	}
	for _, n := range versions {
		v := s.versions[n]
		if v == nil || v.destroyed {
			continue
		}
		switch action {
		case "delete":
			if v.deleted.IsZero() {
				v.deleted = req.now
			}
		case "undelete":
			v.deleted = time.Time{}
		case "destroy":
			v.destroyed = true
			v.data = nil
		}
	}
	s.updated = req.now
	return noContent()
}

func (kv *kvStore) config(req *request) response {
	switch req.op {
	case opRead:
		return req.reply(http.StatusOK, map[string]any{
			"cas_required": kv.casRequired, "delete_version_after": "0s", "max_versions": kv.maxVersions,
		}, nil)
	case opCreate, opUpdate:
		casRequired, err := boolField(req.body, "cas_required", kv.casRequired)
		if err != nil {
			return badRequest(err.Error())
		}
		maxVersions, err := intField(req.body, "max_versions")
		if err != nil {
			return badRequest(err.Error())
		}
		kv.casRequired = casRequired
		if _, ok := req.body["max_versions"]; ok {
			kv.maxVersions = maxVersions
		}
		return noContent()
	}
	return unsupportedOperation()
}

// versionMetadata is the metadata of one version, as returned by data reads
// and writes.
func versionMetadata(s *kvSecret, n int, v *kvVersion) map[string]any {
	deletion := ""
	if !v.deleted.IsZero() {
		deletion = formatTime(v.deleted)
	}
	return map[string]any{
		"created_time":    formatTime(v.created),
		"custom_metadata": s.custom,
		"deletion_time":   deletion,
		"destroyed":       v.destroyed,
		"version":         n,
	}
}

// fullMetadata is the body of a metadata read.
func fullMetadata(s *kvSecret) map[string]any {
	versions := map[string]any{}
	for n, v := range s.versions {
		deletion := ""
		if !v.deleted.IsZero() {
			deletion = formatTime(v.deleted)
		}
		versions[strconv.Itoa(n)] = map[string]any{
			"created_time":  formatTime(v.created),
			"deletion_time": deletion,
			"destroyed":     v.destroyed,
		}
	}
	return map[string]any{
		"cas_required":         s.casRequired,
		"created_time":         formatTime(s.created),
		"current_version":      s.current,
		"custom_metadata":      s.custom,
		"delete_version_after": "0s",
		"max_versions":         s.maxVersions,
		"oldest_version":       s.oldest,
		"updated_time":         formatTime(s.updated),
		"versions":             versions,
	}
}

func decodeObject(b json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	err := dec.Decode(&m)
	return m, err
}

// mergePatch applies a JSON merge patch (RFC 7386) to target.
func mergePatch(target, patch map[string]any) map[string]any {
	if target == nil {
		target = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(target, k)
		case map[string]any:
			tv, _ := target[k].(map[string]any)
			target[k] = mergePatch(tv, pv)
		default:
			target[k] = v
		}
	}
	return target
}
