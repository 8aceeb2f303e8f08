package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

const hashA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDockerfile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    buildSpec
		want    string // the Dockerfile after FROM's line
		wantErr error  // errStep, or nil for any error when bad
		bad     bool
	}{
		{name: "empty", want: ""},
		{name: "run copy env workdir", spec: buildSpec{Steps: []buildStep{
			{Type: "RUN", Args: []string{"echo hi && touch /x"}},
			{Type: "COPY", Args: []string{"./data/hello.txt", "/opt/hello.txt", "", ""}, FilesHash: hashA},
			{Type: "ENV", Args: []string{"A", "1", "B", `say "$HOME" \n`}},
			{Type: "WORKDIR", Args: []string{"/opt"}},
		}}, want: `RUN ["/bin/sh","-c","echo hi \u0026\u0026 touch /x"]
COPY ["e2b-files/` + hashA + `/data/hello.txt","/opt/hello.txt"]
ENV A="1" B="say \"\$HOME\" \\n"
WORKDIR /opt
`},
		{name: "run as another user returns to the current one", spec: buildSpec{Steps: []buildStep{
			{Type: "USER", Args: []string{"user"}},
			{Type: "RUN", Args: []string{"id", "root"}},
			{Type: "RUN", Args: []string{"id", "user"}},
			{Type: "COPY", Args: []string{"a", "/a", "", ""}, FilesHash: hashA},
			{Type: "COPY", Args: []string{"a", "/b", "bob", ""}, FilesHash: hashA},
		}}, want: `USER user
USER root
RUN ["/bin/sh","-c","id"]
USER user
RUN ["/bin/sh","-c","id"]
COPY --chown=user ["e2b-files/` + hashA + `/a","/a"]
COPY --chown=bob ["e2b-files/` + hashA + `/a","/b"]
`},
		{name: "run as root from the image's user", spec: buildSpec{Steps: []buildStep{
			{Type: "RUN", Args: []string{"id", "bob"}},
		}}, want: "USER bob\nRUN [\"/bin/sh\",\"-c\",\"id\"]\nUSER root\n"},
		{name: "multi-line run", spec: buildSpec{Steps: []buildStep{{Type: "RUN", Args: []string{"a\nb"}}}},
			want: "RUN [\"/bin/sh\",\"-c\",\"a\\nb\"]\n"},
		{name: "copy escaping the upload", spec: buildSpec{Steps: []buildStep{
			{Type: "COPY", Args: []string{"../../etc/passwd", "/x"}, FilesHash: hashA}}},
			want: `COPY ["e2b-files/` + hashA + `/etc/passwd","/x"]` + "\n"},
		{name: "copy mode", spec: buildSpec{Steps: []buildStep{
			{Type: "COPY", Args: []string{"a", "/a", "", "0755"}, FilesHash: hashA}}}, bad: true, wantErr: errStep},
		{name: "copy without hash", spec: buildSpec{Steps: []buildStep{{Type: "COPY", Args: []string{"a", "/a"}}}}, bad: true},
		{name: "registry credentials", spec: buildSpec{FromImageRegistry: json.RawMessage(`{"type":"registry"}`)}, bad: true, wantErr: errStep},
		{name: "unknown step", spec: buildSpec{Steps: []buildStep{{Type: "HEALTHCHECK", Args: []string{"x"}}}}, bad: true, wantErr: errStep},
		{name: "env odd", spec: buildSpec{Steps: []buildStep{{Type: "ENV", Args: []string{"A"}}}}, bad: true},
		{name: "env bad name", spec: buildSpec{Steps: []buildStep{{Type: "ENV", Args: []string{"A B", "1"}}}}, bad: true},
		{name: "workdir newline", spec: buildSpec{Steps: []buildStep{{Type: "WORKDIR", Args: []string{"/a\nRUN x"}}}}, bad: true, wantErr: errStep},
		{name: "empty run", spec: buildSpec{Steps: []buildStep{{Type: "RUN"}}}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dockerfile("cove:default", tc.spec)
			if tc.bad {
				if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("err %v, want %v; Dockerfile:\n%s", err, tc.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := "FROM cove:default\n" + tc.want; got != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestTemplateName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"my-app", "my-app"}, {"my_app:v1", "my_app"}, {"a/b", ""}, {"", ""}, {strings.Repeat("a", 41), ""},
	} {
		got, err := templateName(tc.in)
		if (err != nil) != (tc.want == "") || got != tc.want {
			t.Errorf("templateName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// tarOf is an archive of name → content (a trailing / names a directory).
func tarOf(t *testing.T, gz bool, files ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for i := 0; i < len(files); i += 2 {
		hd := &tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(files[i], "/") {
			hd.Typeflag, hd.Mode, hd.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, files[i+1])
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// fakeDaemon answers what the template facade calls of cove's API: info
// and a template build, which it records.
type fakeDaemon struct {
	mu      sync.Mutex
	key     string // the key the build came with
	query   url.Values
	context map[string]string
	fail    string // a build error to stream
}

func (f *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/info":
		json.NewEncoder(w).Encode(apitype.Info{DefaultImage: "default"})
	case r.Method == "POST" && r.URL.Path == "/v1/templates":
		var buf bytes.Buffer
		io.Copy(&buf, r.Body)
		f.mu.Lock()
		f.key, f.query = r.Header.Get("Authorization")+r.Header.Get("X-API-Key"), r.URL.Query()
		f.context = readTarT(buf.Bytes())
		fail := f.fail
		f.mu.Unlock()
		w.Header().Set("Content-Type", apitype.ContentTypeNDJSON)
		enc := json.NewEncoder(w)
		enc.Encode(apitype.TemplateBuildEvent{Step: &apitype.TemplateStepEvent{N: 1, Total: 2, Text: "RUN echo hi"}})
		enc.Encode(apitype.TemplateBuildEvent{Output: "hi\nthere\n"})
		if fail != "" {
			enc.Encode(apitype.TemplateBuildEvent{Error: &apitype.ErrorBody{Error: fail, Code: "bad_request"}})
			return
		}
		enc.Encode(apitype.TemplateBuildEvent{Template: &apitype.TemplateInfo{Name: r.URL.Query().Get("name"), BuildMs: 7}})
	default:
		http.Error(w, "not faked", http.StatusNotFound)
	}
}

func readTarT(b []byte) map[string]string {
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hd, err := tr.Next()
		if err != nil {
			return out
		}
		c, _ := io.ReadAll(tr)
		out[hd.Name] = string(c)
	}
}

// TestTemplateBuildFlow drives the routes as the SDK's Template.build does:
// request, upload link, PUT, trigger, status polling.
func TestTemplateBuildFlow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gzip       bool
		fail       string
		wantStatus string
	}{
		{"gzipped upload", true, "", "ready"},
		{"plain tar upload", false, "", "ready"},
		{"failing build", true, "Dockerfile line 3: RUN false: exited 1", "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := &fakeDaemon{fail: tc.fail}
			daemon := httptest.NewServer(fd)
			defer daemon.Close()
			h := New(Config{API: client.New(daemon.URL, "x"), Logger: slog.New(slog.DiscardHandler)})
			srv := httptest.NewServer(h)
			defer srv.Close()
			call := func(key, method, u string, body io.Reader, want int, out any) {
				t.Helper()
				if !strings.HasPrefix(u, "http") {
					u = srv.URL + u
				}
				req, _ := http.NewRequest(method, u, body)
				if key != "" {
					req.Header.Set("X-API-KEY", key)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != want {
					t.Fatalf("%s %s: %d %s, want %d", method, u, resp.StatusCode, b, want)
				}
				if out != nil {
					if err := json.Unmarshal(b, out); err != nil {
						t.Fatal(err)
					}
				}
			}
			const key = "e2b_aaaa"
			var made struct{ TemplateID, BuildID string }
			call(key, "POST", "/v3/templates", strings.NewReader(`{"name":"myapp:v1","cpuCount":2,"memoryMB":512}`), 202, &made)
			if made.TemplateID != "myapp" || made.BuildID == "" {
				t.Fatalf("made %+v", made)
			}
			// Another key sees none of it.
			call("e2b_bbbb", "GET", "/templates/myapp/files/"+hashA, nil, 404, nil)
			var link struct {
				Present bool
				URL     string
			}
			call(key, "GET", "/templates/myapp/files/"+hashA, nil, 200, &link)
			if link.Present || !strings.HasPrefix(link.URL, srv.URL+uploadPrefix) {
				t.Fatalf("link %+v", link)
			}
			up := tarOf(t, tc.gzip, "data/", "", "data/hello.txt", "hello\n", "../evil", "x")
			// A tampered link is refused; so is the trigger before the
			// upload.
			call("", "PUT", strings.Replace(link.URL, "sig=", "sig=0", 1), bytes.NewReader(up), 403, nil)
			steps := `{"fromTemplate":"base","startCmd":"sleep 1","readyCmd":"true","steps":[
				{"type":"RUN","args":["echo hi"]},
				{"type":"COPY","args":["data","/opt/data","",""],"filesHash":"` + hashA + `"},
				{"type":"ENV","args":["GREETING","hello world"]}]}`
			call(key, "POST", "/v2/templates/myapp/builds/"+made.BuildID, strings.NewReader(steps), 400, nil)
			// The evil entry fails the build; upload a clean archive.
			call("", "PUT", link.URL, bytes.NewReader(tarOf(t, tc.gzip, "data/", "", "data/hello.txt", "hello\n")), 200, nil)
			call(key, "GET", "/templates/myapp/files/"+hashA, nil, 200, &link)
			if !link.Present {
				t.Fatal("uploaded files not present")
			}
			call("e2b_bbbb", "POST", "/v2/templates/myapp/builds/"+made.BuildID, strings.NewReader(steps), 404, nil)
			call(key, "POST", "/v2/templates/myapp/builds/"+made.BuildID, strings.NewReader(steps), 202, nil)
			var st struct {
				Status     string
				LogEntries []logEntry
				Reason     *struct{ Message string }
			}
			var msgs []string
			off := 0
			for deadline := time.Now().Add(10 * time.Second); ; {
				call(key, "GET", "/templates/myapp/builds/"+made.BuildID+"/status?logsOffset="+strconv.Itoa(off), nil, 200, &st)
				off += len(st.LogEntries)
				for _, e := range st.LogEntries {
					msgs = append(msgs, e.Message)
				}
				if st.Status != "building" || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st.Status != tc.wantStatus {
				t.Fatalf("status %q, want %q; logs %q", st.Status, tc.wantStatus, msgs)
			}
			all := strings.Join(msgs, "\n")
			for _, want := range []string{"[1/2] RUN echo hi", "hi\nthere"} {
				if !strings.Contains(all, want) {
					t.Errorf("logs %q lack %q", msgs, want)
				}
			}
			if tc.fail != "" && (st.Reason == nil || !strings.Contains(st.Reason.Message, tc.fail)) {
				t.Errorf("reason %+v, want %q", st.Reason, tc.fail)
			}
			call("e2b_bbbb", "GET", "/templates/myapp/builds/"+made.BuildID+"/status", nil, 404, nil)
			fd.mu.Lock()
			defer fd.mu.Unlock()
			if fd.key != "Bearer "+key {
				t.Errorf("built with key %q, want the caller's", fd.key)
			}
			q := fd.query
			if q.Get("name") != "myapp" || q.Get("start") != "sleep 1" || q.Get("ready") != "true" || q.Get("cpus") != "2" || q.Get("memory_mib") != "512" {
				t.Errorf("query %v", q)
			}
			wantDF := "FROM cove:default\nRUN [\"/bin/sh\",\"-c\",\"echo hi\"]\nCOPY [\"e2b-files/" + hashA + "/data\",\"/opt/data\"]\nENV GREETING=\"hello world\"\n"
			if fd.context["Dockerfile"] != wantDF {
				t.Errorf("Dockerfile\n%s\nwant\n%s", fd.context["Dockerfile"], wantDF)
			}
			if got := fd.context["e2b-files/"+hashA+"/data/hello.txt"]; got != "hello\n" {
				t.Errorf("context %v", fd.context)
			}
			// The build is done: its link no longer takes uploads.
			call("", "PUT", link.URL, bytes.NewReader(up), 404, nil)
		})
	}
}

func TestUploadLinkExpires(t *testing.T) {
	tm := newTemplates()
	h := &Handler{tmpl: tm}
	exp := time.Now().Add(-time.Second).Unix()
	u := uploadPrefix + "b1/" + hashA + "?exp=" + strconv.FormatInt(exp, 10) + "&sig=" + tm.sign("b1", hashA, exp)
	for _, tc := range []struct {
		name, method, url string
		want              int
	}{
		{"expired", "PUT", u, 403},
		{"get", "GET", u, 405},
		{"no sig", "PUT", uploadPrefix + "b1/" + hashA, 403},
		{"bad hash", "PUT", uploadPrefix + "b1/zz?exp=1&sig=" + tm.sign("b1", "zz", 1), 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.upload(rec, httptest.NewRequest(tc.method, tc.url, strings.NewReader("x")))
			if rec.Code != tc.want {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

func TestInside(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"a/b.txt", "a/b.txt", true}, {"./a/", "a", true}, {"/abs/x", "abs/x", true},
		{"../x", "", false}, {"a/../../x", "", false}, {".", "", false},
	} {
		got, ok := inside(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("inside(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestWriteContextRefusesEscapes: an upload whose entries leave its
// directory fails the build's context rather than landing elsewhere.
func TestWriteContextRefusesEscapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		ok    bool
	}{
		{"clean", []string{"a/", "", "a/x", "1"}, true},
		{"dotdot", []string{"../x", "1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := t.TempDir() + "/up"
			if err := os.WriteFile(p, tarOf(t, true, tc.files...), 0o600); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			err := writeContext(&buf, "FROM x\n", map[string]string{hashA: p})
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if tc.ok {
				got := readTarT(buf.Bytes())
				if got["Dockerfile"] != "FROM x\n" || got["e2b-files/"+hashA+"/a/x"] != "1" {
					t.Fatalf("context %v", got)
				}
			}
		})
	}
}

func TestBuildLogBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n         int
		thenError bool
		want      int
	}{
		{"under", 10, false, 10},
		{"over", maxLogs + 50, false, maxLogs},
		{"over, then an error", maxLogs + 50, true, maxLogs + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &build{}
			for range tc.n {
				b.log("info", "line")
			}
			if tc.thenError {
				b.log("error", "failed")
			}
			if len(b.logs) != tc.want {
				t.Fatalf("%d entries, want %d", len(b.logs), tc.want)
			}
			if tc.n > maxLogs && b.logs[maxLogs-1].Level != "warn" {
				t.Fatalf("entry %d is %+v, want the truncation notice", maxLogs-1, b.logs[maxLogs-1])
			}
		})
	}
}
