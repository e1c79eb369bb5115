package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lush-agents/lush/gateway"
)

// The chart's checks (make test): helm lint and helm template over the default values and every
// example values file, the rendered manifests validated against the Kubernetes schemas by
// kubeconform, and what matters about them asserted. The tools are the pinned ones the Makefile
// installs (helm-tool, kubeconform-tool); kubernetesVersion is the Makefile's K8S_VERSION.

const (
	chartDir          = "../deploy/helm/lush"
	kubernetesVersion = "1.37.2"
	schemaLocation    = "../.tools/k8s-schemas"
)

// tool finds a pinned tool in .tools/bin (or on PATH); without it the test skips, except under
// CI, where a missing tool fails.
func tool(t *testing.T, name, target string) string {
	t.Helper()
	if p, _ := filepath.Abs("../.tools/bin/" + name); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed in CI: run the tests with make test (make %s)", name, target)
	}
	t.Skipf("%s not installed (make %s)", name, target)
	return ""
}

// chartTools returns helm and kubeconform, with kubeconform's schemas in place.
func chartTools(t *testing.T) (helm, kubeconform string) {
	t.Helper()
	helm = tool(t, "helm", "helm-tool")
	kubeconform = tool(t, "kubeconform", "kubeconform-tool")
	if !fileExists(filepath.Join(schemaLocation, "v"+kubernetesVersion+"-standalone-strict", "servicemonitor-monitoring-v1.json")) {
		if os.Getenv("CI") != "" {
			t.Fatalf("the Kubernetes %s schemas are not in %s in CI: run the tests with make test (make kubeconform-tool)", kubernetesVersion, schemaLocation)
		}
		t.Skipf("the Kubernetes %s schemas are not in %s (make kubeconform-tool)", kubernetesVersion, schemaLocation)
	}
	return helm, kubeconform
}

func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// object is one rendered Kubernetes object.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) name() string { s, _ := dig(o, "metadata", "name").(string); return s }

// dig follows keys (strings) and indexes (ints) into decoded YAML; nil when one is missing.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if o, isObject := v.(object); isObject {
				m, ok = o, true
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func render(t *testing.T, helm string, values ...string) (string, error) {
	t.Helper()
	args := []string{"template", "lush", chartDir, "--namespace", "agents", "--kube-version", kubernetesVersion}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	return run(helm, args...)
}

func decodeObjects(t *testing.T, manifests string) []object {
	t.Helper()
	var objs []object
	dec := yaml.NewDecoder(strings.NewReader(manifests))
	for {
		var o map[string]any // nested maps decode as map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered manifests are not YAML: %v", err)
		}
		if o != nil {
			objs = append(objs, object(o))
		}
	}
}

func find(objs []object, kind, name string) object {
	for _, o := range objs {
		if o.kind() == kind && (name == "" || o.name() == name) {
			return o
		}
	}
	return nil
}

func env(container any) map[string]any {
	out := map[string]any{}
	list, _ := dig(container, "env").([]any)
	for _, e := range list {
		name, _ := dig(e, "name").(string)
		if v, ok := dig(e, "value").(string); ok {
			out[name] = v
		} else {
			out[name] = dig(e, "valueFrom")
		}
	}
	return out
}

// chartCase is one values file and what its rendering must hold.
type chartCase struct {
	values         string // under the chart's examples/; "" for the defaults
	replicas       int    // the lush Deployment's spec.replicas (0: none, autoscaled)
	hpa            bool
	serviceMonitor bool
	postgres       string // "" (SQLite in the state volume), "external" or "bundled"
	bundle         bool
	vault          bool
	mesh           bool   // ext_authz and the xDS server
	pdb            string // "minAvailable=2" or "maxUnavailable=1"
}

var chartCases = []chartCase{
	{values: "", replicas: 1, pdb: "maxUnavailable=1"},
	{values: "minimal.yaml", replicas: 1, pdb: "maxUnavailable=1"},
	{values: "ha-postgres.yaml", hpa: true, serviceMonitor: true, postgres: "external", bundle: true, pdb: "minAvailable=2"},
	{values: "bundled-postgres.yaml", replicas: 2, postgres: "bundled", pdb: "maxUnavailable=1"},
	{values: "vault-kubernetes.yaml", replicas: 1, vault: true, pdb: "maxUnavailable=1"},
	{values: "mesh.yaml", replicas: 2, postgres: "external", mesh: true, pdb: "maxUnavailable=1"},
}

// TestHelmChart: helm lint, helm template and kubeconform (Kubernetes 1.37.2 schemas, strict) pass
// for the defaults and every example, and the rendering holds what the chart promises.
func TestHelmChart(t *testing.T) {
	helm, kubeconform := chartTools(t)
	examples, _ := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	for _, ex := range examples {
		if !slices.ContainsFunc(chartCases, func(c chartCase) bool { return c.values == filepath.Base(ex) }) {
			t.Errorf("examples/%s has no case in chartCases: add what its rendering must hold", filepath.Base(ex))
		}
	}
	for _, c := range chartCases {
		name := c.values
		if name == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			var values []string
			if c.values != "" {
				values = append(values, filepath.Join(chartDir, "examples", c.values))
			}
			lintArgs := []string{"lint", "--strict", chartDir, "--kube-version", kubernetesVersion}
			for _, v := range values {
				lintArgs = append(lintArgs, "-f", v)
			}
			if out, err := run(helm, lintArgs...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			manifests, err := render(t, helm, values...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, manifests)
			}
			file := filepath.Join(t.TempDir(), "manifests.yaml")
			if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
				t.Fatal(err)
			}
			validate(t, kubeconform, file)
			checkRendering(t, c, decodeObjects(t, manifests))
		})
	}
}

// validate runs kubeconform, strict, against the offline schemas (the ServiceMonitor's from the
// Prometheus Operator's CRD); a kind without a schema fails.
func validate(t *testing.T, kubeconform, file string) {
	t.Helper()
	out, err := run(kubeconform, "-strict", "-summary", "-kubernetes-version", kubernetesVersion,
		"-schema-location", schemaLocation, file)
	if err != nil {
		t.Fatalf("kubeconform: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Invalid: 0, Errors: 0, Skipped: 0") {
		t.Fatalf("kubeconform: %s", out)
	}
}

var secretLooking = regexp.MustCompile(`(?i)(password|passwd|secret|token|api_?key|private|credential)`)

func checkRendering(t *testing.T, c chartCase, objs []object) {
	t.Helper()
	deploy := find(objs, "Deployment", "lush")
	if deploy == nil {
		t.Fatal("no Deployment lush")
	}
	// Replicas: fixed, or left to the HorizontalPodAutoscaler.
	replicas, _ := dig(deploy, "spec", "replicas").(int)
	if replicas != c.replicas {
		t.Errorf("Deployment replicas = %v, want %d", dig(deploy, "spec", "replicas"), c.replicas)
	}
	if got := find(objs, "HorizontalPodAutoscaler", "") != nil; got != c.hpa {
		t.Errorf("HorizontalPodAutoscaler rendered = %v, want %v", got, c.hpa)
	}
	pdb := find(objs, "PodDisruptionBudget", "lush")
	if pdb == nil {
		t.Error("no PodDisruptionBudget")
	} else {
		key, want, _ := strings.Cut(c.pdb, "=")
		if got := fmt.Sprint(dig(pdb, "spec", key)); got != want {
			t.Errorf("PodDisruptionBudget %s = %s, want %s", key, got, want)
		}
	}
	if find(objs, "NetworkPolicy", "lush") == nil {
		t.Error("no NetworkPolicy for the gateway")
	}
	sm := find(objs, "ServiceMonitor", "")
	if got := sm != nil; got != c.serviceMonitor {
		t.Errorf("ServiceMonitor rendered = %v, want %v", got, c.serviceMonitor)
	}
	if sm != nil && (dig(sm, "spec", "endpoints", 0, "port") != "http" || dig(sm, "spec", "endpoints", 0, "path") != "/metrics") {
		t.Errorf("ServiceMonitor endpoint = %v, want port http, path /metrics", dig(sm, "spec", "endpoints", 0))
	}

	// Secrets only by reference: no Secret rendered, no secret-looking variable with a value.
	for _, o := range objs {
		if o.kind() == "Secret" {
			t.Errorf("the chart rendered Secret %s: secrets must come from existing Secrets", o.name())
		}
	}
	for _, o := range objs {
		for _, kind := range []string{"containers", "initContainers"} {
			list, _ := dig(o, "spec", "template", "spec", kind).([]any)
			for _, ctr := range list {
				for name, v := range env(ctr) {
					if _, isValue := v.(string); isValue && secretLooking.MatchString(name) && !strings.HasSuffix(name, "_FILE") {
						t.Errorf("%s %s: env %s has an inline value %q: a secret must come from a Secret", o.kind(), o.name(), name, v)
					}
				}
			}
		}
	}

	// Every workload: non-root, read-only root filesystem, no capabilities, no escalation,
	// seccomp RuntimeDefault.
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "StatefulSet" {
			continue
		}
		pod := dig(o, "spec", "template", "spec")
		if dig(pod, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s %s: pod securityContext.runAsNonRoot is not true", o.kind(), o.name())
		}
		if dig(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s %s: pod seccompProfile is not RuntimeDefault", o.kind(), o.name())
		}
		for _, kind := range []string{"containers", "initContainers"} {
			list, _ := dig(pod, kind).([]any)
			for _, ctr := range list {
				sc := dig(ctr, "securityContext")
				where := fmt.Sprintf("%s %s container %v", o.kind(), o.name(), dig(ctr, "name"))
				if dig(sc, "readOnlyRootFilesystem") != true {
					t.Errorf("%s: readOnlyRootFilesystem is not true", where)
				}
				if dig(sc, "allowPrivilegeEscalation") != false {
					t.Errorf("%s: allowPrivilegeEscalation is not false", where)
				}
				if drop, _ := dig(sc, "capabilities", "drop").([]any); !slices.Contains(drop, any("ALL")) {
					t.Errorf("%s: capabilities.drop = %v, want [ALL]", where, drop)
				}
			}
		}
	}

	// The lush container: probes on /health, the environment lushctl serve reads.
	lush := dig(deploy, "spec", "template", "spec", "containers", 0)
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if path := dig(lush, probe, "httpGet", "path"); path != "/health" {
			t.Errorf("lush %s path = %v, want /health", probe, path)
		}
	}
	vars := env(lush)
	if vars["LUSH_CONFIG"] != "/etc/lush/config/gateway.yaml" {
		t.Errorf("LUSH_CONFIG = %v", vars["LUSH_CONFIG"])
	}
	switch c.postgres {
	case "external":
		if ref := dig(vars["LUSH_DECISION_LOG"], "secretKeyRef", "name"); ref != "lush-db" {
			t.Errorf("LUSH_DECISION_LOG = %v, want the URL from Secret lush-db", vars["LUSH_DECISION_LOG"])
		}
	case "bundled":
		url, _ := vars["LUSH_DECISION_LOG"].(string)
		if !strings.HasPrefix(url, "postgres://lush@lush-postgresql:5432/lush") {
			t.Errorf("LUSH_DECISION_LOG = %q, want the bundled PostgreSQL without a password", url)
		}
		if ref := dig(vars["PGPASSWORD"], "secretKeyRef", "name"); ref != "lush-pg" {
			t.Errorf("PGPASSWORD = %v, want it from Secret lush-pg", vars["PGPASSWORD"])
		}
		if find(objs, "StatefulSet", "lush-postgresql") == nil {
			t.Error("postgresql.enabled but no StatefulSet lush-postgresql")
		}
	default:
		if vars["LUSH_DECISION_LOG"] != "/var/lib/lush/decisions.db" {
			t.Errorf("LUSH_DECISION_LOG = %v, want the state volume's SQLite file", vars["LUSH_DECISION_LOG"])
		}
	}
	// What the process writes is in its volumes: the root filesystem and the project are read-only.
	if vars["TRACE_BACKEND"] == "sqlite" && vars["LUSH_TRACES_DB"] != "/var/lib/lush/traces.db" {
		t.Errorf("LUSH_TRACES_DB = %v, want the state volume's /var/lib/lush/traces.db", vars["LUSH_TRACES_DB"])
	}
	bundleVars := []string{"LUSH_BUNDLE_SERVICE", "LUSH_BUNDLE_RESOURCE", "LUSH_BUNDLE_TOKEN_FILE", "LUSH_BUNDLE_VERIFY_KEY",
		"LUSH_BUNDLE_VERIFY_KEY_ID", "LUSH_BUNDLE_VERIFY_ALG", "LUSH_BUNDLE_POLL_MIN", "LUSH_BUNDLE_POLL_MAX", "LUSH_BUNDLE_LONG_POLL"}
	for _, v := range bundleVars {
		if _, ok := vars[v]; ok != c.bundle {
			t.Errorf("env %s set = %v, want %v", v, ok, c.bundle)
		}
	}
	if c.bundle {
		if vars["LUSH_BUNDLE_SERVICE"] != "https://bundles.internal" || vars["LUSH_BUNDLE_TOKEN_FILE"] != "/var/run/lush/keys/bundle.token" ||
			vars["LUSH_BUNDLE_VERIFY_KEY"] != "/etc/lush/bundle-verify/verify.pem" || vars["LUSH_BUNDLE_LONG_POLL"] != "60s" {
			t.Errorf("bundle env = %v", vars)
		}
	}

	// The gateway config: lushctl serve's own loader accepts it, with the chart's settings in it.
	cm := find(objs, "ConfigMap", "lush")
	text, _ := dig(cm, "data", "gateway.yaml").(string)
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := gateway.LoadConfig(file)
	if err != nil {
		t.Fatalf("the rendered gateway config does not load: %v\n%s", err, text)
	}
	if listen, ok := vars["LUSH_EXT_AUTHZ_LISTEN"].(string); ok {
		cfg.ExtAuthz.Listen = listen // as lushctl serve sets it
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the rendered gateway config is not valid: %v\n%s", err, text)
	}
	if key := cfg.DecisionLogChain.CheckpointKey; !strings.HasPrefix(key, "/var/lib/lush/") && !strings.HasPrefix(key, "/var/run/lush/keys/") {
		t.Errorf("decision_log_chain.checkpoint_key = %q, want it in the state volume or the keys volume", key)
	}
	if !cfg.Auth.AuthenticatesPeople() {
		t.Error("the rendered gateway config authenticates nobody: lushctl serve refuses it")
	}
	if c.vault {
		v := cfg.Credentials.Vault
		if v == nil || v.Auth.Method != "kubernetes" || v.Auth.Role != "lush" || v.Auth.Mount != "kubernetes" ||
			v.Auth.JWTFile != "/var/run/secrets/lush/vault/token" || v.CACert != "/etc/lush/vault-ca/ca.crt" {
			t.Errorf("credentials.vault = %+v, want Kubernetes auth with role lush and the projected token", v)
		}
		token := volume(deploy, "vault-token")
		if aud := dig(token, "projected", "sources", 0, "serviceAccountToken", "audience"); aud != "vault" {
			t.Errorf("vault-token volume = %v, want a projected service account token for audience vault", token)
		}
		if dig(deploy, "spec", "template", "spec", "serviceAccountName") != "lush" {
			t.Errorf("serviceAccountName = %v, want lush", dig(deploy, "spec", "template", "spec", "serviceAccountName"))
		}
	} else if cfg.Credentials.Vault != nil {
		t.Errorf("credentials.vault set without vault.enabled: %+v", cfg.Credentials.Vault)
	}
	if c.mesh {
		if cfg.ExtAuthz.TLS == nil || cfg.ExtAuthz.Listen != "0.0.0.0:9191" {
			t.Errorf("ext_authz = %+v, want mTLS on 0.0.0.0:9191", cfg.ExtAuthz)
		}
		if find(objs, "Deployment", "lush-xds") == nil || find(objs, "Service", "lush-xds") == nil {
			t.Error("mesh: no xDS Deployment and Service")
		}
	} else if find(objs, "Deployment", "lush-xds") != nil {
		t.Error("xDS Deployment rendered without xds.enabled")
	}
}

func volume(deploy object, name string) any {
	list, _ := dig(deploy, "spec", "template", "spec", "volumes").([]any)
	for _, v := range list {
		if dig(v, "name") == name {
			return v
		}
	}
	return nil
}

// TestHelmChartRefusesBadValues: bad values fail helm template (what helm install runs) with a
// message naming the value and the fix; those values.schema.json refuses fail helm lint too (a
// template's fail is only an INFO line to helm lint).
func TestHelmChartRefusesBadValues(t *testing.T) {
	helm, _ := chartTools(t)
	cases := []struct {
		name, values, want string
		schema             bool // refused by values.schema.json (else by the templates)
	}{
		{"replicas not a number", `replicaCount: three`, `at '/replicaCount': got string, want integer`, true},
		{"a session key inline", "secrets:\n  sessionKey:\n    value: c2VjcmV0", `at '/secrets/sessionKey': additional properties 'value' not allowed`, true},
		{"a database URL inline", "database:\n  url: postgres://lush:pw@db/lush", `at '/database': additional properties 'url' not allowed`, true},
		{"a bundle token inline", "bundle:\n  enabled: true\n  service: https://b\n  resource: r\n  token: s3cr3t", `at '/bundle/token': got string, want object`, true},
		{"a secret env value", "extraEnv:\n  - name: SLACK_TOKEN\n    value: xoxb-1", `extraEnv SLACK_TOKEN: looks like a secret and has an inline value`, false},
		{"a secret in the gateway config", "config:\n  auth: {api_keys: [{name: a, sha256: x, principal: 'serviceaccount:a'}]}\n  credentials: {vault: {auth: {method: approle, role_id: r, secret_id: s3cr3t}}}", `config: "secret_id" looks like a secret`, false},
		{"several replicas without PostgreSQL", `replicaCount: 3`, `needs a shared PostgreSQL`, false},
		{"vault without a role", "vault:\n  enabled: true\n  address: https://vault:8200", `at '/vault/role': minLength`, true},
		{"ext_authz without mTLS", "extAuthz:\n  enabled: true", `at '/extAuthz/tls/existingSecret': minLength`, true},
		{"bundled PostgreSQL without its Secret", "replicaCount: 2\npostgresql:\n  enabled: true", `at '/postgresql/auth/existingSecret': minLength`, true},
		{"an unknown mode", `mode: everything`, `at '/mode': value must be one of 'stack', 'gateway'`, true},
		{"a poll interval in milliseconds", "bundle:\n  enabled: true\n  service: https://b\n  resource: r\n  pollMin: 500ms", `at '/bundle/pollMin'`, true},
		{"a pinned build with a bundle server", "bundle:\n  enabled: true\n  service: https://b\n  resource: r\nproject:\n  build: 3fa9c1e2", `project.build and bundle.enabled are both set`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(c.values+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := render(t, helm, file)
			if err == nil {
				t.Fatalf("helm template accepted %q", c.values)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("helm template's error does not say %q:\n%s", c.want, out)
			}
			if strings.Contains(out, "s3cr3t") || strings.Contains(out, "xoxb-1") || strings.Contains(out, ":pw@") {
				t.Errorf("the error repeats the secret value:\n%s", out)
			}
			if c.schema {
				lint, err := run(helm, "lint", chartDir, "--kube-version", kubernetesVersion, "-f", file)
				if err == nil || !strings.Contains(lint, c.want) {
					t.Errorf("helm lint did not refuse %q with %q (err %v):\n%s", c.values, c.want, err, lint)
				}
			}
		})
	}
}

// TestKubeconformSchemasAreStrict: the offline schemas (test/tools/k8sschemas) refuse what the API
// server refuses: an unknown field, a wrong type, a missing required field; and deploy/examples'
// manifests validate.
func TestKubeconformSchemasAreStrict(t *testing.T) {
	helm, kubeconform := chartTools(t)
	manifests, err := render(t, helm)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, manifests)
	}
	deployment := ""
	for _, doc := range strings.Split(manifests, "\n---\n") {
		if strings.Contains(doc, "\nkind: Deployment\n") {
			deployment = doc
		}
	}
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "          imagePullPolicy: IfNotPresent\n", "          imagePullPolicy: IfNotPresent\n          imagePolicy: Always\n", "additional properties 'imagePolicy' not allowed"},
		{"wrong type", "  replicas: 1\n", "  replicas: \"one\"\n", "at '/spec/replicas'"},
		{"missing required field", "        - name: lush\n", "        - nam: lush\n", "missing property 'name'"},
		{"bad int-or-string", "              port: http\n", "              port: [http]\n", "at '/spec/template/spec/containers/0/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(deployment, c.old) {
				t.Fatalf("the rendered Deployment has no %q to change", c.old)
			}
			file := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(file, []byte(strings.Replace(deployment, c.old, c.new, 1)), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(kubeconform, "-strict", "-kubernetes-version", kubernetesVersion, "-schema-location", schemaLocation, file)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("kubeconform accepted the Deployment with %s (err %v):\n%s", c.name, err, out)
			}
		})
	}
	// The ServiceMonitor's schema (from its CRD) is strict too.
	withMonitor, err := render(t, helm, filepath.Join(chartDir, "examples", "ha-postgres.yaml"))
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, withMonitor)
	}
	monitors := 0
	for _, doc := range strings.Split(withMonitor, "\n---\n") {
		if !strings.Contains(doc, "\nkind: ServiceMonitor\n") {
			continue
		}
		monitors++
		file := filepath.Join(t.TempDir(), "monitor.yaml")
		if err := os.WriteFile(file, []byte(strings.Replace(doc, "      path: /metrics\n", "      path: /metrics\n      scrapeEvery: 30s\n", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := run(kubeconform, "-strict", "-kubernetes-version", kubernetesVersion, "-schema-location", schemaLocation, file)
		if err == nil || !strings.Contains(out, "additional properties 'scrapeEvery' not allowed") {
			t.Errorf("kubeconform accepted a ServiceMonitor endpoint with an unknown field (err %v):\n%s", err, out)
		}
	}
	if monitors != 1 {
		t.Errorf("examples/ha-postgres.yaml rendered %d ServiceMonitors, want 1", monitors)
	}
	examples, _ := filepath.Glob("../deploy/examples/*.yaml")
	if len(examples) == 0 {
		t.Fatal("no manifests in deploy/examples")
	}
	for _, ex := range examples {
		validate(t, kubeconform, ex)
	}
}
