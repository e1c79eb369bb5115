// Command k8sschemas writes the JSON schemas of one Kubernetes version's built-in kinds in the
// layout kubeconform reads from a local -schema-location
// (<out>/v<version>-standalone-strict/<kind>-<group>-<version>.json), without the network: the
// source is api/openapi-spec/swagger.json of the k8s.io/kubernetes module at that version, which
// `go mod download` fetches through the Go module proxy.
//
// Each schema is one definition of the spec with the definitions it reaches copied beside it
// (standalone: no reference leaves the file), made strict the way kubeconform's own schemas are:
// an object with properties accepts no other property, an int-or-string accepts a string or an
// integer, a quantity a string or a number, and an optional field also accepts null.
//
// -crd adds the kinds of CustomResourceDefinitions kept in a Go module (module@version/path, e.g.
// the Prometheus Operator's ServiceMonitor), from each version's openAPIV3Schema, made strict the
// same way.
//
//	go run . -version 1.37.2 -out ../../../.tools/k8s-schemas \
//	  -crd github.com/prometheus-operator/prometheus-operator@v0.85.0/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// crdFlags are the -crd flags: module@version/path of CustomResourceDefinition files.
type crdFlags []string

func (c *crdFlags) String() string     { return strings.Join(*c, ",") }
func (c *crdFlags) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	version := flag.String("version", "", "the Kubernetes version, e.g. 1.37.2 (the k8s.io/kubernetes module's v1.37.2)")
	spec := flag.String("spec", "", "read this swagger.json instead of downloading the module")
	out := flag.String("out", "", "the schema location: the schemas go to <out>/v<version>-standalone-strict")
	var crds crdFlags
	flag.Var(&crds, "crd", "module@version/path of a CustomResourceDefinition file whose kinds to add (repeatable)")
	flag.Parse()
	if err := run(*version, *spec, *out, crds); err != nil {
		fmt.Fprintln(os.Stderr, "k8sschemas:", err)
		os.Exit(1)
	}
}

var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

func run(version, spec, out string, crds []string) error {
	if !versionPattern.MatchString(version) {
		return fmt.Errorf("-version: %q is not a Kubernetes release like 1.37.2", version)
	}
	if out == "" {
		return errors.New("-out: required (the schema location kubeconform is given)")
	}
	if spec == "" {
		dir, err := moduleDir("k8s.io/kubernetes@v" + version)
		if err != nil {
			return err
		}
		spec = filepath.Join(dir, "api", "openapi-spec", "swagger.json")
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		return fmt.Errorf("read the OpenAPI spec: %w", err)
	}
	var doc struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("read the OpenAPI spec %s: %w", spec, err)
	}
	target := filepath.Join(out, "v"+version+"-standalone-strict")
	// Written beside, then renamed: an interrupted run leaves no half set that looks complete.
	tmp := target + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("create the schema directory: %w", err)
	}
	n, err := writeSchemas(doc.Definitions, tmp)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: no definition has x-kubernetes-group-version-kind", spec)
	}
	for _, crd := range crds {
		m, err := writeCRDSchemas(crd, tmp)
		if err != nil {
			return err
		}
		n += m
	}
	if err := os.RemoveAll(target); err != nil {
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("move the schemas in place: %w", err)
	}
	fmt.Printf("k8sschemas: %d schemas of Kubernetes v%s in %s\n", n, version, target)
	return nil
}

// moduleDir downloads a module into the module cache and returns its directory.
func moduleDir(module string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %v: %s", module, err, strings.TrimSpace(stderr.String()))
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(stdout, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, m.Error)
	}
	return m.Dir, nil
}

// writeSchemas writes one file per group, version and kind; it returns how many.
func writeSchemas(defs map[string]any, dir string) (int, error) {
	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	sort.Strings(names)
	n := 0
	for _, name := range names {
		def, _ := defs[name].(map[string]any)
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if kind == "" || version == "" {
				continue
			}
			schema := standalone(defs, name)
			data, err := json.MarshalIndent(schema, "", "  ")
			if err != nil {
				return n, fmt.Errorf("%s: %w", name, err)
			}
			if err := os.WriteFile(filepath.Join(dir, fileName(group, version, kind)), append(data, '\n'), 0o644); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// fileName is kubeconform's name for a kind's schema: the kind, the group's first label (none for
// the core group) and the version, lower case.
func fileName(group, version, kind string) string {
	name := strings.ToLower(kind)
	if group != "" {
		first, _, _ := strings.Cut(group, ".")
		name += "-" + strings.ToLower(first)
	}
	return name + "-" + strings.ToLower(version) + ".json"
}

const (
	refPrefix = "#/definitions/"
	quantity  = "io.k8s.apimachinery.pkg.api.resource.Quantity"
)

// standalone is the definition named root, made strict, with every definition it reaches under
// "definitions" (also made strict), so that its references resolve inside the file.
func standalone(defs map[string]any, root string) map[string]any {
	reached := map[string]bool{}
	var visit func(v any)
	visit = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, refPrefix)
				if !reached[name] {
					reached[name] = true
					visit(defs[name])
				}
			}
			for _, x := range v {
				visit(x)
			}
		case []any:
			for _, x := range v {
				visit(x)
			}
		}
	}
	visit(defs[root])
	schema := strict(defs[root]).(map[string]any)
	if len(reached) > 0 {
		sub := map[string]any{}
		for name := range reached {
			sub[name] = strict(defs[name])
		}
		// A quantity is written as a string ("500m", "1Gi") or a number (2).
		if _, ok := sub[quantity]; ok {
			sub[quantity] = map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
		}
		schema["definitions"] = sub
	}
	return schema
}

// strict returns a copy of a schema made strict (see the package comment).
func strict(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if v["format"] == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		out := make(map[string]any, len(v)+1)
		for k, x := range v {
			out[k] = strict(x)
		}
		if props, ok := out["properties"].(map[string]any); ok {
			if _, set := out["additionalProperties"]; !set {
				out["additionalProperties"] = false
			}
			required := map[string]bool{}
			if req, ok := v["required"].([]any); ok {
				for _, r := range req {
					if s, ok := r.(string); ok {
						required[s] = true
					}
				}
			}
			for name, p := range props {
				if pm, ok := p.(map[string]any); ok && !required[name] {
					props[name] = nullable(pm)
				}
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = strict(x)
		}
		return out
	}
	return v
}

// nullable lets an optional property also be null, as the API server accepts.
func nullable(p map[string]any) map[string]any {
	switch t := p["type"].(type) {
	case string:
		p["type"] = []any{t, "null"}
	case nil:
		if _, ok := p["$ref"]; ok {
			return map[string]any{"anyOf": []any{p, map[string]any{"type": "null"}}}
		}
	}
	return p
}

// writeCRDSchemas writes one schema per kind and version of the CustomResourceDefinitions in a
// file of a Go module (module@version/path); it returns how many.
func writeCRDSchemas(ref, dir string) (int, error) {
	at := strings.Index(ref, "@")
	slash := strings.Index(ref[max(at, 0):], "/")
	if at < 0 || slash < 0 {
		return 0, fmt.Errorf("-crd %s: want module@version/path", ref)
	}
	module, path := ref[:at+slash], ref[at+slash+1:]
	modDir, err := moduleDir(module)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(filepath.Join(modDir, filepath.FromSlash(path)))
	if err != nil {
		return 0, fmt.Errorf("-crd %s: %w", ref, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var crd struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Group string `yaml:"group"`
				Names struct {
					Kind string `yaml:"kind"`
				} `yaml:"names"`
				Versions []struct {
					Name   string `yaml:"name"`
					Schema struct {
						OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
					} `yaml:"schema"`
				} `yaml:"versions"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&crd); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return n, fmt.Errorf("-crd %s: %w", ref, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema.OpenAPIV3Schema == nil {
				return n, fmt.Errorf("-crd %s: %s %s has no openAPIV3Schema", ref, crd.Spec.Names.Kind, v.Name)
			}
			schema, err := json.MarshalIndent(strict(v.Schema.OpenAPIV3Schema), "", "  ")
			if err != nil {
				return n, fmt.Errorf("-crd %s: %w", ref, err)
			}
			if err := os.WriteFile(filepath.Join(dir, fileName(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)), append(schema, '\n'), 0o644); err != nil {
				return n, err
			}
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("-crd %s: no CustomResourceDefinition", ref)
	}
	return n, nil
}
