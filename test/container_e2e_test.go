package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dockerImage is what the Dockerfile's final stage says about the container lushctl serve runs
// in: enough to run the same configuration without docker.
type dockerImage struct {
	env         []string          // ENV, as KEY=VALUE
	user        string            // USER
	workdir     string            // WORKDIR: where the project is mounted
	volumes     []string          // VOLUME
	chown       map[string]string // COPY --chown: destination → owner
	healthcheck []string          // HEALTHCHECK's CMD (exec form)
	entrypoint  []string          // ENTRYPOINT (exec form)
	cmd         []string          // CMD (exec form)
}

// readDockerfile parses the final stage of a Dockerfile: the instructions above, in the forms the
// project's Dockerfile uses (ENV KEY=VALUE, exec-form JSON arrays).
func readDockerfile(t *testing.T, path string) dockerImage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var img dockerImage
	for _, line := range dockerInstructions(string(data)) {
		keyword, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(keyword) {
		case "FROM":
			img = dockerImage{chown: map[string]string{}}
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				if !strings.Contains(kv, "=") {
					t.Fatalf("Dockerfile: ENV %s: only the KEY=VALUE form is understood here", rest)
				}
				img.env = append(img.env, strings.Trim(kv, `"`))
			}
		case "USER":
			img.user = rest
		case "WORKDIR":
			img.workdir = rest
		case "VOLUME":
			img.volumes = append(img.volumes, execForm(t, rest)...)
		case "COPY":
			fields := strings.Fields(rest)
			for _, f := range fields {
				if owner, ok := strings.CutPrefix(f, "--chown="); ok {
					img.chown[strings.TrimSuffix(fields[len(fields)-1], "/")] = owner
				}
			}
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, " CMD ")
			if !ok {
				t.Fatalf("Dockerfile: HEALTHCHECK %s has no CMD", rest)
			}
			img.healthcheck = execForm(t, cmd)
		case "ENTRYPOINT":
			img.entrypoint = execForm(t, rest)
		case "CMD":
			img.cmd = execForm(t, rest)
		}
	}
	return img
}

// dockerInstructions returns a Dockerfile's instructions, one a line: comments and blank lines
// dropped, continuation lines joined.
func dockerInstructions(dockerfile string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(dockerfile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if body, more := strings.CutSuffix(line, `\`); more {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// execForm parses an instruction's JSON array, or its words when it is not one.
func execForm(t *testing.T, s string) []string {
	t.Helper()
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") {
		return strings.Fields(s)
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("Dockerfile: %s: %v", s, err)
	}
	return out
}

// distrolessIDs are the users of the distroless base images, as uid:gid.
var distrolessIDs = map[string]string{"root": "0:0", "nonroot": "65532:65532"}

// numericOwner turns "nonroot:nonroot" (or "65532:65532") into uid and gid.
func numericOwner(t *testing.T, owner string) (int, int) {
	t.Helper()
	user, group, ok := strings.Cut(owner, ":")
	if !ok {
		group = user
	}
	ids := make([]int, 2)
	for i, name := range []string{user, group} {
		if id, ok := distrolessIDs[name]; ok {
			name, _, _ = strings.Cut(id, ":")
		}
		n, err := strconv.Atoi(name)
		if err != nil {
			t.Fatalf("Dockerfile: owner %q is neither numeric nor a distroless user", owner)
		}
		ids[i] = n
	}
	return ids[0], ids[1]
}

// hostPaths maps the image's paths to the directories standing in for them.
type hostPaths map[string]string

func (m hostPaths) of(p string) string {
	for image, host := range m {
		if p == image || strings.HasPrefix(p, image+"/") {
			return host + strings.TrimPrefix(p, image)
		}
	}
	return p
}

// The documented container run (Dockerfile, docs/running.md) without docker: the project, with a
// kept and deployed build, mounted read-only; the image's state volume writable by the image's
// user, as the Dockerfile creates it; the Dockerfile's environment and entrypoint; lushctl serve
// as that non-root user. It serves /health (and the HEALTHCHECK passes on the PORT given at run
// time), answers a chat, keeps its state in the volume and stops cleanly.
func TestContainerConfiguration(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running as uid %d: this test needs root to start lushctl serve as the image's non-root user on a read-only project", os.Geteuid())
	}
	img := readDockerfile(t, "../Dockerfile")
	if img.user == "" || img.workdir == "" || len(img.volumes) != 1 || len(img.entrypoint) == 0 || len(img.healthcheck) == 0 {
		t.Fatalf("Dockerfile: the final stage needs USER, WORKDIR, one VOLUME, ENTRYPOINT and HEALTHCHECK: %+v", img)
	}
	uid, gid := volumeOwner(t, img)
	volume := img.volumes[0]
	paths := containerFS(t, img, uid, gid)

	// The project, built and deployed on the host (as another user), then mounted read-only.
	project := paths.of(img.workdir)
	if err := os.CopyFS(project, os.DirFS(agentProject(t))); err != nil {
		t.Fatal(err)
	}
	buildAndDeploy(t, project)
	readOnly(t, project)

	port := freePort(t)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + project, "TMPDIR=" + paths.of("/tmp")}
	for _, kv := range img.env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, k+"="+paths.of(v))
	}
	// docker run -p …:PORT -e LUSH_CONFIG=/project/gateway.yaml, and the offline model.
	env = append(env, fmt.Sprintf("PORT=%d", port), "LUSH_LISTEN_HOST=127.0.0.1",
		"LUSH_CONFIG="+paths.of(img.workdir+"/gateway.yaml"), "LUSH_MODEL_PROVIDER=scripted")
	asUser := func(argv []string) *exec.Cmd {
		cmd := exec.Command(paths.of(argv[0]), argv[1:]...)
		cmd.Env, cmd.Dir = env, project
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		return cmd
	}

	p := startCmd(t, asUser(append(append([]string{}, img.entrypoint...), img.cmd...)))
	waitFor(t, p, "lush: build ", 60*time.Second)
	health := asUser(img.healthcheck)
	if out, err := health.CombinedOutput(); err != nil {
		t.Errorf("HEALTHCHECK %v with PORT=%d: %v\n%s", img.healthcheck, port, err, out)
	}
	code, res := chatHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/agents/assistant/chat", port), "alice-key-0123456789", "Say hello")
	if code != 200 || res["response"] != "The tool said: hello from a local tool" {
		t.Errorf("chat: %d %v", code, res)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM:\n%s", code, p.out.String())
	}
	for _, name := range []string{"decisions.db", "scheduler.db", "traces.db"} {
		if _, err := os.Stat(filepath.Join(paths.of(volume), name)); err != nil {
			t.Errorf("the state volume lacks %s: %v", name, err)
		}
	}
}

// volumeOwner returns the image's user, and checks that the image creates its volume owned by
// that user.
func volumeOwner(t *testing.T, img dockerImage) (uid, gid int) {
	t.Helper()
	uid, gid = numericOwner(t, img.user)
	owner, ok := img.chown[img.volumes[0]]
	if !ok {
		t.Fatalf("Dockerfile: nothing creates %s owned by %s: a VOLUME the image does not create is root's, and the image's user cannot write its state", img.volumes[0], img.user)
	}
	if ou, og := numericOwner(t, owner); ou != uid || og != gid {
		t.Fatalf("Dockerfile: %s is created owned by %s, not by the image's user %s", img.volumes[0], owner, img.user)
	}
	return uid, gid
}

// containerFS makes the directories standing in for the container's (each traversable by the
// image's user): the volume owned by uid:gid, a /tmp, and the binary; the project directory is
// left to the caller. It returns the map from the image's paths to them.
func containerFS(t *testing.T, img dockerImage, uid, gid int) hostPaths {
	t.Helper()
	root, err := os.MkdirTemp("", "lush-container-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := hostPaths{img.workdir: filepath.Join(root, "project"), img.volumes[0]: filepath.Join(root, "state"),
		img.entrypoint[0]: filepath.Join(root, "bin", "lushctl"), "/tmp": filepath.Join(root, "tmp")}
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(paths.of("/tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(paths.of("/tmp"), 0o777|os.ModeSticky); err != nil { // --tmpfs /tmp
		t.Fatal(err)
	}
	if err := os.Mkdir(paths.of(img.volumes[0]), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(paths.of(img.volumes[0]), uid, gid); err != nil {
		t.Fatal(err)
	}
	installBinary(t, lushctlBin, paths.of(img.entrypoint[0]))
	return paths
}

// installBinary puts the lushctl under test at path, executable by all (the test binary's own
// directory is private to the user who built it).
func installBinary(t *testing.T, from, path string) {
	t.Helper()
	if err := os.Link(from, path); err == nil {
		return
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// readOnly makes every file and directory under dir unwritable (chmod -R a-w).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(path, info.Mode().Perm()&^0o222)
	})
	if err != nil {
		t.Fatal(err)
	}
}
