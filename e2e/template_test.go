package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// templateCLI runs cove template build with args and returns the
// template it printed (--json), its progress (stderr) and how long it took.
func templateCLI(t *testing.T, d *daemon, args ...string) (apitype.TemplateInfo, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.bin, append([]string{"template", "build", "--json", "--pool-size", "0"}, args...)...)
	cmd.Env = cliEnv(d, t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("cove template build %s: %v\n%s\ndaemon log:\n%s", strings.Join(args, " "), err, stderr.String(), d.logTail())
	}
	var ti apitype.TemplateInfo
	if err := json.Unmarshal(stdout.Bytes(), &ti); err != nil {
		t.Fatalf("cove template build --json printed %q: %v", stdout.String(), err)
	}
	return ti, stderr.String(), took
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// stepLines are the progress lines of the steps, in order.
func stepLines(progress string) []string {
	var out []string
	for _, l := range strings.Split(progress, "\n") {
		if strings.HasPrefix(l, "step ") {
			out = append(out, l)
		}
	}
	return out
}

// leftovers lists the snapshot directories a template's name starts.
func leftovers(t *testing.T, d *daemon, name string) []string {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(d.stateDir(), "snapshots"))
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), name) || strings.Contains(e.Name(), "-"+name) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestTemplateBuild: a Dockerfile with RUN (making files, downloading from
// an allowed test server), COPY, ENV and WORKDIR builds; a sandbox spawned
// from it sees the files, env and cwd; a rebuild finds every step cached;
// an edited RUN rebuilds from there; a failing rebuild keeps the template;
// one in use is not deleted; deleting it removes its caches.
func TestTemplateBuild(t *testing.T) {
	d, tn := suite.shared, suite.net
	ctx := context.Background()
	name := "e2e-tmpl-" + randomHex(3)
	dir := t.TempDir()
	dockerfile := `FROM cove:default
ARG GREETING=hi
ENV APP_MODE=test GREETING=${GREETING}
RUN mkdir -p /opt/tools && echo built-by-run > /opt/tools/made.txt
RUN python3 -c "import urllib.request; urllib.request.urlretrieve('` + webURL("http", tn.Allowed) + `', '/opt/tools/download.txt')"
WORKDIR /srv/app
COPY app/ ./
RUN echo %s > /opt/tools/last.txt
`
	writeFiles(t, dir, map[string]string{
		"Dockerfile": strings.Replace(dockerfile, "%s", "first", 1), ".dockerignore": "app/ignored.txt\n",
		"app/hello.txt": "hello from the context\n", "app/run.sh": "#!/bin/sh\necho run\n", "app/ignored.txt": "no\n",
	})
	t.Cleanup(func() { d.c.DeleteTemplate(context.Background(), name) })
	args := []string{"-t", name, "--build-arg", "GREETING=bonjour", "--allow-cidr", cidr(tn.Allowed), dir}

	ti, progress, cold := templateCLI(t, d, args...)
	steps := stepLines(progress)
	if len(steps) != 8 || strings.Contains(progress, "(cached)") {
		t.Fatalf("first build's steps:\n%s\nwant 8, none cached", progress)
	}
	if ti.Name != name || ti.Base != "cove:default" || !strings.HasPrefix(ti.Digest, "sha256:") || len(ti.Steps) != 8 || ti.Snapshot == nil {
		t.Errorf("template %+v", ti)
	}

	sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: name})[0]
	out := execOK(t, d, sb, `pwd; echo "$APP_MODE $GREETING"; cat /opt/tools/made.txt hello.txt /opt/tools/last.txt; `+
		`head -c 40 /opt/tools/download.txt; echo; stat -c %a run.sh; test -e ignored.txt && echo ignored-copied; true`)
	for _, want := range []string{"/srv/app\n", "test bonjour\n", "built-by-run\n", "hello from the context\n", "first\n", banner(tn.Allowed)[:20], "755\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("a sandbox spawned from the template printed:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "ignored-copied") {
		t.Error(".dockerignore was not honoured")
	}
	// In use: not deleted.
	if err := d.c.DeleteTemplate(ctx, name); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete a template in use: %v, want a conflict", err)
	}
	d.c.DeleteSandbox(ctx, sb.id)

	ti2, progress, cached := templateCLI(t, d, args...)
	for _, l := range stepLines(progress) {
		if !strings.HasSuffix(l, "(cached)") {
			t.Errorf("rebuild: step not cached: %s", l)
		}
	}
	if !ti2.Cached {
		t.Errorf("rebuild: %+v, want cached", ti2)
	}
	t.Logf("template build: cold %s, every step cached %s", cold.Round(time.Millisecond), cached.Round(time.Millisecond))

	// Edit the last RUN: the steps before it are cached, it runs again.
	writeFiles(t, dir, map[string]string{"Dockerfile": strings.Replace(dockerfile, "%s", "second", 1)})
	_, progress, edited := templateCLI(t, d, args...)
	steps = stepLines(progress)
	for i, l := range steps {
		if want := i < 7; strings.HasSuffix(l, "(cached)") != want {
			t.Errorf("after editing the last RUN, step %d: %s (want cached %v)", i+1, l, want)
		}
	}
	t.Logf("template build after editing the last RUN: %s; its progress:\n%s", edited.Round(time.Millisecond), progress)
	sb = create(t, d, apitype.CreateSandboxRequest{SnapshotTag: name})[0]
	if out := execOK(t, d, sb, "cat /opt/tools/last.txt"); out != "second\n" {
		t.Errorf("after the rebuild: %q, want second", out)
	}
	d.c.DeleteSandbox(ctx, sb.id)

	// A failing rebuild leaves the template as it was.
	writeFiles(t, dir, map[string]string{"Dockerfile": strings.Replace(dockerfile, "echo %s", "exit 3; echo", 1)})
	_, err := d.c.BuildTemplate(ctx, client.TemplateBuild{Name: name, Context: contextTar(t, dir), BuildArgs: map[string]string{"GREETING": "bonjour"},
		Network: &apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "line 8") {
		t.Errorf("a failing RUN: %v, want an error naming line 8", err)
	}
	sb = create(t, d, apitype.CreateSandboxRequest{SnapshotTag: name})[0]
	if out := execOK(t, d, sb, "cat /opt/tools/last.txt"); out != "second\n" {
		t.Errorf("after a failed rebuild: %q, want the previous version's second", out)
	}
	d.c.DeleteSandbox(ctx, sb.id)

	list, err := d.c.ListTemplates(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("list templates: %v %v", list, err)
	}
	snaps, _ := d.c.ListSnapshots(ctx)
	found := false
	for _, s := range snaps {
		found = found || s.Tag == name
		if strings.HasPrefix(s.Tag, name+".") {
			t.Errorf("list snapshots shows a step cache: %s", s.Tag)
		}
	}
	if !found {
		t.Errorf("list snapshots has no %s", name)
	}
	if err := d.c.DeleteTemplate(ctx, name); err != nil {
		t.Fatalf("delete the template: %v", err)
	}
	if left := leftovers(t, d, name); len(left) > 0 {
		t.Errorf("deleting the template left %v", left)
	}
}

// contextTar is a build context directory as a tar stream.
func contextTar(t *testing.T, dir string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tw.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return &buf
}

// TestTemplateBuildErrors: an unknown instruction, a failing RUN and a
// COPY from outside the context each fail naming their line, and leave no
// template and no step cache.
func TestTemplateBuildErrors(t *testing.T) {
	apiLayer(t)
	d, tn := suite.shared, suite.net
	ctx := context.Background()
	fetch := `RUN python3 -c "import urllib.request; urllib.request.urlopen('%s', timeout=5)"`
	for _, tc := range []struct {
		name, dockerfile, want string
	}{
		// The build's policy allows only the allowed test server.
		{"denied-download", "FROM cove:default\n" + strings.Replace(fetch, "%s", webURL("http", tn.Other), 1) + "\n", "line 2"},
		{"unknown", "FROM cove:default\nRUN true\nFROBNICATE now\n", "line 3: unknown instruction: FROBNICATE"},
		{"failing-run", "FROM cove:default\nRUN echo one > /one\nRUN echo about to fail; exit 7\n", "line 3"},
		{"copy-outside", "FROM cove:default\nCOPY ../../etc/passwd /x\n", "line 2: COPY source ../../etc/passwd is outside the build context"},
		{"copy-missing", "FROM cove:default\nCOPY nothere.txt /x\n", "line 2: COPY source nothere.txt: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "e2e-bad-" + randomHex(3)
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"Dockerfile": tc.dockerfile})
			var outputs []string
			policy := &apitype.NetworkPolicy{AllowCIDRs: []string{cidr(tn.Allowed)}}
			_, err := d.c.BuildTemplate(ctx, client.TemplateBuild{Name: name, Context: contextTar(t, dir), Network: policy}, func(ev apitype.TemplateBuildEvent) {
				outputs = append(outputs, ev.Output)
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build: %v, want an error with %q", err, tc.want)
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != 400 {
				t.Errorf("build: %#v, want a 400", err)
			}
			if tc.name == "failing-run" && !strings.Contains(strings.Join(outputs, ""), "about to fail") {
				t.Errorf("the failing RUN's output did not stream: %q", outputs)
			}
			if _, err := d.c.GetTemplate(ctx, name); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("get the failed template: %v, want not found", err)
			}
			if _, err := d.c.GetSnapshot(ctx, name); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("get the failed template's snapshot: %v, want not found", err)
			}
			if left := leftovers(t, d, name); len(left) > 0 {
				t.Errorf("the failed build left %v", left)
			}
		})
	}
}

// TestTemplateBuildKilled: a daemon killed with SIGKILL while a build runs
// a step, and again while it saves one, leaves, once restarted, no
// template, no builder sandbox, no step cache, no half snapshot and
// nothing on the host (waitNoLeaks).
func TestTemplateBuildKilled(t *testing.T) {
	d := ownDaemon(t, "template-killed")
	ctx := context.Background()
	saving := writing(filepath.Join(d.stateDir(), "snapshots"))
	for _, tc := range []struct {
		name, dockerfile, step string
		at                     func() bool // once the step has begun
	}{
		{"killed-run", "FROM cove:default\nRUN echo a > /a\nRUN sleep 600\n", "sleep",
			func() bool { time.Sleep(time.Second); return true }}, // the step runs
		{"killed-save", "FROM cove:default\nRUN echo a > /a\nRUN echo b > /b\n", "echo a", saving},
	} {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"Dockerfile": tc.dockerfile})
		begun := make(chan struct{})
		done := make(chan int, 1)
		go func() {
			once := sync.OnceFunc(func() { close(begun) })
			_, err := d.c.BuildTemplate(ctx, client.TemplateBuild{Name: tc.name, Context: contextTar(t, dir)}, func(ev apitype.TemplateBuildEvent) {
				if ev.Step != nil && strings.Contains(ev.Step.Text, tc.step) {
					once()
				}
			})
			status := 0 // no answer: the daemon died
			if err == nil {
				status = 200
			}
			done <- status
		}()
		select {
		case <-begun:
		case <-done:
			t.Fatalf("%s: the build ended before its step %q\n%s", tc.name, tc.step, d.logTail())
		case <-time.After(10 * time.Minute):
			t.Fatalf("%s: the build did not reach its step %q\n%s", tc.name, tc.step, d.logTail())
		}
		killWhen(t, d, tc.name, tc.at, done)
		if err := d.start(); err != nil {
			t.Fatal(err)
		}
		waitNoLeaks(t, d, leakCheck{})
		if tis, err := d.c.ListTemplates(ctx); err != nil || len(tis) != 0 {
			t.Errorf("%s: after the restart: templates %+v, %v; want none", tc.name, tis, err)
		}
		if sns, _ := d.c.ListSnapshots(ctx); len(sns) != 0 {
			t.Errorf("%s: after the restart: snapshots %+v; want none", tc.name, sns)
		}
		if ents, _ := os.ReadDir(filepath.Join(d.stateDir(), "snapshots")); len(ents) != 0 {
			t.Errorf("%s: after the restart the snapshot directory holds %v", tc.name, ents)
		}
		if list, _ := d.c.ListSandboxes(ctx); len(list) != 0 {
			t.Errorf("%s: after the restart: sandboxes %+v; want none", tc.name, list)
		}
	}
}

// TestTemplateStartReady: the start command runs, and the ready check
// passes, before the template is saved: a sandbox spawned from it has the
// server running at once. USER is the account of the RUNs after it, and of
// the template's sandboxes.
func TestTemplateStartReady(t *testing.T) {
	d := suite.shared
	ctx := context.Background()
	name := "e2e-ready-" + randomHex(3)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Dockerfile": "FROM cove:default\nWORKDIR /srv\nADD tools.tgz /opt/\nRUN echo served > index.html\nUSER user\nRUN whoami > /tmp/who.txt\n"})
	writeTgz(t, filepath.Join(dir, "tools.tgz"), map[string]string{"pkg/tool.sh": "#!/bin/sh\necho tool\n"})
	none := 0
	ti, err := d.c.BuildTemplate(ctx, client.TemplateBuild{Name: name, Context: contextTar(t, dir), PoolSize: &none,
		Start: "exec python3 -m http.server 8000 --bind 127.0.0.1",
		Ready: `python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)"`}, nil)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, d.logTail())
	}
	t.Cleanup(func() { d.c.DeleteTemplate(context.Background(), name) })
	if len(ti.Steps) != 6 {
		t.Errorf("steps %+v", ti.Steps)
	}
	sb := create(t, d, apitype.CreateSandboxRequest{SnapshotTag: name})[0]
	defer d.c.DeleteSandbox(ctx, sb.id)
	out := execOK(t, d, sb, `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/index.html', timeout=5).read().decode(), end='')"`)
	if out != "served\n" {
		t.Errorf("the server started before the snapshot answered %q, want served", out)
	}
	if out := execOK(t, d, sb, "whoami; cat /tmp/who.txt; pwd; /opt/pkg/tool.sh"); out != "user\nuser\n/srv\ntool\n" {
		t.Errorf("user, the RUN's user, cwd and the ADDed archive's tool: %q, want user, user, /srv, tool", out)
	}
}

// writeTgz writes a gzipped tar of files (a .sh is executable).
func writeTgz(t *testing.T, path string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, content := range files {
		mode := int64(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(content)), Typeflag: tar.TypeReg})
		io.WriteString(tw, content)
	}
	tw.Close()
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
