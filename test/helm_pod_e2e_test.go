package test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lush-agents/lush/test/pgtest"
)

// The chart's pod without Kubernetes: the rendered Deployment and ConfigMap of the chart, run as
// the kubelet would run them. The Secrets are files of mode 0440 owned by the fsGroup, as
// Kubernetes mounts them; the keys init container's script runs as the pod's user and copies the
// private keys into the keys volume; then lushctl serve runs as that user with the image's
// environment overridden by the container's, on a read-only project, with only the emptyDirs
// (/tmp, the state, the keys) writable. The readiness probe's path answers 200, a chat is
// answered, the state lands in the state volume and SIGTERM stops it cleanly.
func TestHelmChartPodRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: this test needs root to run the pod's processes as its non-root user", os.Geteuid())
	}
	helm := tool(t, "helm", "helm-tool")
	cases := []struct {
		name   string
		values string   // added to the values every case has
		db     bool     // a PostgreSQL whose URL is Secret lush-db's url
		state  []string // the files the state volume must hold afterwards
	}{
		// The decision log, the traces and the loop scheduler's store in the state volume.
		{name: "SQLite state", state: []string{"decisions.db", "scheduler.db", "traces.db"}},
		// Replicas: the decision log and the scheduler in PostgreSQL; the traces still in the
		// state volume (the default would be under the read-only project).
		{name: "external PostgreSQL", values: "replicaCount: 2\ndatabase: {existingSecret: lush-db, urlKey: url}\n", db: true,
			state: []string{"traces.db"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key, err := ed25519GenerateKeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			secrets := map[string]map[string]string{"lush-keys": {
				"session.key":    base64.StdEncoding.EncodeToString(randomBytes(t, 48)),
				"delegation.pem": key,
				"checkpoint.pem": key,
			}}
			if c.db {
				secrets["lush-db"] = map[string]string{"url": pgtest.Start(t).CreateDatabase(t, "lush")}
			}
			runChartPod(t, helm, c.values, secrets, c.state)
		})
	}
}

// runChartPod renders the chart with the case's values and runs its pod (TestHelmChartPodRuns).
func runChartPod(t *testing.T, helm, extraValues string, secrets map[string]map[string]string, wantState []string) {
	t.Helper()
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`config:
  auth:
    api_keys:
      - {name: alice, sha256: `+sha256hex("alice-key-0123456789")+`, principal: "user:alice", groups: ["group:eng"]}
secrets:
  sessionKey: {existingSecret: lush-keys, key: session.key}
  delegationKey: {existingSecret: lush-keys, key: delegation.pem}
  checkpointKey: {existingSecret: lush-keys, key: checkpoint.pem}
extraEnv:
  - {name: LUSH_MODEL_PROVIDER, value: scripted}
`+extraValues), 0o600); err != nil {
		t.Fatal(err)
	}
	manifests, err := render(t, helm, values)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, manifests)
	}
	objs := decodeObjects(t, manifests)
	deploy, cm := find(objs, "Deployment", "lush"), find(objs, "ConfigMap", "lush")
	pod := dig(deploy, "spec", "template", "spec")
	uid, _ := dig(pod, "securityContext", "runAsUser").(int)
	gid, _ := dig(pod, "securityContext", "runAsGroup").(int)
	fsGroup, _ := dig(pod, "securityContext", "fsGroup").(int)
	if uid == 0 || gid == 0 || fsGroup == 0 {
		t.Fatalf("the pod's securityContext has no non-root runAsUser, runAsGroup and fsGroup: %v", dig(pod, "securityContext"))
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(fsGroup)}}

	// The pod's filesystem: each volume a directory, mounted where the containers mount it.
	root, err := os.MkdirTemp("", "lush-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	volumes := map[string]string{} // volume name → host directory
	list, _ := dig(pod, "volumes").([]any)
	for _, v := range list {
		name, _ := dig(v, "name").(string)
		dir := filepath.Join(root, "volumes", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		volumes[name] = dir
		switch {
		case dig(v, "emptyDir") != nil:
			mustChmod(t, dir, 0o777|os.ModeSticky) // world-writable, as the kubelet makes an emptyDir
		case dig(v, "configMap") != nil:
			if dig(v, "configMap", "name") != "lush" {
				t.Fatalf("volume %s: an unknown ConfigMap %v", name, dig(v, "configMap", "name"))
			}
			data, _ := dig(cm, "data").(map[string]any)
			for k, text := range data {
				writeFile(t, filepath.Join(dir, k), text.(string), 0o644, -1)
			}
		case dig(v, "secret") != nil:
			secretName, _ := dig(v, "secret", "secretName").(string)
			items, _ := dig(v, "secret", "items").([]any)
			for _, it := range items {
				k, _ := dig(it, "key").(string)
				p, _ := dig(it, "path").(string)
				value, ok := secrets[secretName][k]
				if !ok {
					t.Fatalf("volume %s: Secret %s has no key %s", name, secretName, k)
				}
				writeFile(t, filepath.Join(dir, p), value, 0o440, fsGroup) // group-readable under fsGroup
			}
		default:
			t.Fatalf("volume %s: a kind this test does not stand in for: %v", name, v)
		}
	}
	mounts := func(ctr any) hostPaths {
		m := hostPaths{}
		list, _ := dig(ctr, "volumeMounts").([]any)
		for _, vm := range list {
			name, _ := dig(vm, "name").(string)
			path, _ := dig(vm, "mountPath").(string)
			m[path] = volumes[name]
		}
		return m
	}

	// The keys init container: its script, with its mounts' paths, as the pod's user.
	inits, _ := dig(pod, "initContainers").([]any)
	if len(inits) != 1 {
		t.Fatalf("want the keys init container, got %d init containers", len(inits))
	}
	initMounts := mounts(inits[0])
	script, _ := dig(inits[0], "command", 2).(string)
	script = initMounts.replacer().Replace(script)
	initCmd := exec.Command("/bin/sh", "-c", script)
	initCmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("the keys init container failed: %v\n%s", err, out)
	}

	// The lush container: the project (built, deployed, read-only) at LUSH_PROJECT, the mounts.
	ctr := dig(pod, "containers", 0)
	paths := mounts(ctr)
	vars := env(ctr)
	project := filepath.Join(root, "project")
	if err := os.CopyFS(project, os.DirFS(agentProject(t))); err != nil {
		t.Fatal(err)
	}
	buildAndDeploy(t, project)
	readOnly(t, project)
	paths[vars["LUSH_PROJECT"].(string)] = project
	// The config names files by their paths in the container.
	configDir := paths.of("/etc/lush/config")
	config, err := os.ReadFile(filepath.Join(configDir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config = []byte(paths.replacer().Replace(string(config)))
	mustChmod(t, configDir, 0o755)
	writeFile(t, filepath.Join(configDir, "gateway.yaml"), string(config), 0o644, -1)
	bin := filepath.Join(root, "lushctl")
	installBinary(t, lushctlBin, bin)

	img := readDockerfile(t, "../Dockerfile")
	port := freePort(t)
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + paths.of("/tmp"), "TMPDIR=" + paths.of("/tmp")}
	for _, kv := range img.env { // the image's ENV, then the container's env over it
		k, v, _ := strings.Cut(kv, "=")
		environ = append(environ, k+"="+paths.of(v))
	}
	for k, v := range vars {
		if s, ok := v.(string); ok {
			environ = append(environ, k+"="+paths.of(s))
			continue
		}
		name, _ := dig(v, "secretKeyRef", "name").(string)
		key, _ := dig(v, "secretKeyRef", "key").(string)
		value, ok := secrets[name][key]
		if !ok {
			t.Fatalf("env %s: from %v, which this test does not stand in for", k, v)
		}
		environ = append(environ, k+"="+value)
	}
	environ = append(environ, fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1") // loopback for the test
	cmd := exec.Command(bin, execArgs(ctr)...)
	cmd.Env, cmd.Dir = environ, project
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	p := startCmd(t, cmd)
	waitFor(t, p, "lush: build ", 60*time.Second)

	probe, _ := dig(ctr, "readinessProbe", "httpGet", "path").(string)
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, probe))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("readiness probe GET %s: %d", probe, res.StatusCode)
	}
	code, answer := chatHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/agents/assistant/chat", port), "alice-key-0123456789", "Say hello")
	if code != 200 || answer["response"] != "The tool said: hello from a local tool" {
		t.Errorf("chat: %d %v", code, answer)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, p.out.String())
	}
	state := paths.of("/var/lib/lush")
	for _, name := range []string{"decisions.db", "scheduler.db", "traces.db"} {
		_, err := os.Stat(filepath.Join(state, name))
		if want := slices.Contains(wantState, name); want != (err == nil) {
			t.Errorf("the state volume holds %s: %v, want %v", name, err == nil, want)
		}
	}
	for _, name := range []string{"session.key", "delegation.pem", "checkpoint.pem"} {
		info, err := os.Stat(filepath.Join(paths.of("/var/run/lush/keys"), name))
		if err != nil {
			t.Errorf("the keys volume lacks %s: %v", name, err)
		} else if st := info.Sys().(*syscall.Stat_t); info.Mode().Perm() != 0o600 || int(st.Uid) != uid {
			t.Errorf("keys/%s: mode %04o owner %d, want 0600 owned by %d", name, info.Mode().Perm(), st.Uid, uid)
		}
	}
	if strings.Contains(p.out.String(), secrets["lush-keys"]["session.key"]) {
		t.Error("serve's output holds the session key")
	}
}

// replacer rewrites the container's paths (at a mount and below) to the host's, in one pass.
func (m hostPaths) replacer() *strings.Replacer {
	var pairs []string
	for path, host := range m {
		pairs = append(pairs, path+"/", host+"/")
	}
	return strings.NewReplacer(pairs...)
}

// execArgs is the container's command line after the image's entrypoint (lushctl): its args.
func execArgs(ctr any) []string {
	var out []string
	list, _ := dig(ctr, "args").([]any)
	for _, a := range list {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

func writeFile(t *testing.T, path, content string, mode os.FileMode, gid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	mustChmod(t, path, mode)
	if gid >= 0 {
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
}

func mustChmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// ed25519GenerateKeyPEM is a new Ed25519 private key as PKCS #8 PEM.
func ed25519GenerateKeyPEM() (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// TestHelmChartXDSCommand: the xDS Deployment's command line (examples/mesh.yaml) is one lushctl
// accepts, and with --print it serves the sidecars' listeners, routes and clusters for the
// project's deployed build, reading the chart's gateway config.
func TestHelmChartXDSCommand(t *testing.T) {
	helm := tool(t, "helm", "helm-tool")
	manifests, err := render(t, helm, filepath.Join(chartDir, "examples", "mesh.yaml"))
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, manifests)
	}
	objs := decodeObjects(t, manifests)
	xds := dig(find(objs, "Deployment", "lush-xds"), "spec", "template", "spec", "containers", 0)
	args := execArgs(xds)
	if len(args) < 2 || args[0] != "mesh" || args[1] != "xds" {
		t.Fatalf("the xDS container runs %v, want lushctl mesh xds", args)
	}
	project := agentProject(t)
	buildAndDeploy(t, project)
	config := filepath.Join(t.TempDir(), "gateway.yaml")
	text, _ := dig(find(objs, "ConfigMap", "lush"), "data", "gateway.yaml").(string)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	paths := hostPaths{"/etc/lush/config/gateway.yaml": config, "/project": project}
	for i, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[i] = k + "=" + paths.of(v)
		} else {
			args[i] = paths.of(a)
		}
	}
	out, err := exec.Command(lushctlBin, append(args, "--print")...).CombinedOutput()
	if err != nil {
		t.Fatalf("lushctl %v --print: %v\n%s", args, err, out)
	}
	for _, want := range []string{`"listeners"`, `"lush_mcp"`, `"lush_ext_authz"`, `"lush.agents.svc"`, `9191`, `"/etc/envoy/lush-client/tls.crt"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("lushctl mesh xds --print does not show %s:\n%.2000s", want, out)
		}
	}
}
