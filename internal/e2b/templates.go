package e2b

// E2B's template builder (the SDK's Template().…, Template.build) served
// by cove's Dockerfile templates: the SDK asks for a build
// (POST /v3/templates), uploads each COPY's files to the link the facade
// hands out (GET /templates/{id}/files/{hash}, then a PUT to that link),
// sends its steps (POST /v2/templates/{id}/builds/{buildID}) and polls the
// build's status and logs. The facade turns the steps into a Dockerfile
// and a build context holding the uploads, builds it with
// POST /v1/templates as the caller, and keeps, in memory, only what a
// build in flight needs: its uploads (spooled to temporary files), its
// status and its log.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// uploadPrefix is the path of the upload links: signed, so served without
// an API key.
const uploadPrefix = "/_cove/e2b-uploads/"

// Limits of what the facade keeps for a build.
const (
	uploadTTL    = 30 * time.Minute // an upload link's lifetime
	buildTTL     = time.Hour        // a build's record after its request or its end
	maxUpload    = 4 << 30          // one COPY's archive
	buildTimeout = 2 * time.Hour    // one build's run
	maxLogs      = 20000            // log entries kept of one build
)

var (
	hashRe     = regexp.MustCompile(`^[0-9a-fA-F]{1,128}$`)
	envKeyRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tmplNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)
)

// errStep is a step the facade cannot turn into cove's Dockerfile.
var errStep = errors.New("not served by cove's templates")

// templates is the state of the builds in flight.
type templates struct {
	secret []byte // signs upload links and names owners
	mu     sync.Mutex
	builds map[string]*build // by buildID
}

func newTemplates() *templates {
	s := make([]byte, 32)
	rand.Read(s)
	return &templates{secret: s, builds: map[string]*build{}}
}

// build is one build: requested, then triggered, then done.
type build struct {
	owner     string // ownerOf the key that asked for it
	id        string
	name      string // the cove template
	cpus, mem int
	expires   time.Time
	uploads   map[string]string // files hash → spooled archive
	status    string            // waiting, building, ready, error
	logs      []logEntry
	reason    string
}

type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

// ownerOf names a key without keeping it.
func (t *templates) ownerOf(key string) string {
	m := hmac.New(sha256.New, t.secret)
	m.Write([]byte("owner\x00" + key))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

func (t *templates) sign(buildID, hash string, exp int64) string {
	m := hmac.New(sha256.New, t.secret)
	fmt.Fprintf(m, "upload\x00%s\x00%s\x00%d", buildID, hash, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// get is the caller's build of template id (nil: none of its own).
func (t *templates) get(owner, tmpl, buildID string) *build {
	b := t.builds[buildID]
	if b == nil || b.owner != owner || b.name != tmpl {
		return nil
	}
	return b
}

// sweep forgets expired builds and removes their uploads; t.mu is held.
func (t *templates) sweep(now time.Time) {
	for id, b := range t.builds {
		if now.After(b.expires) && b.status != "building" {
			b.dropUploads()
			delete(t.builds, id)
		}
	}
}

func (b *build) dropUploads() {
	for h, p := range b.uploads {
		os.Remove(p)
		delete(b.uploads, h)
	}
}

// log records an entry; past maxLogs only errors are kept, after one
// entry saying so, so a chatty RUN cannot grow the facade without bound.
func (b *build) log(level, msg string) {
	switch n := len(b.logs); {
	case n == maxLogs-1:
		msg, level = fmt.Sprintf("cove: more than %d log lines: only errors are shown from here", maxLogs), "warn"
	case n >= maxLogs && level != "error":
		return
	}
	b.logs = append(b.logs, logEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg})
}

func (h *Handler) templateRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v3/templates", h.requestBuild)
	m.HandleFunc("GET /templates/{templateID}/files/{hash}", h.uploadLink)
	m.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", h.triggerBuild)
	m.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", h.buildStatus)
	m.HandleFunc("GET /templates/aliases/{alias}", h.templateAlias)
	m.HandleFunc("GET /templates", h.listTemplates)
	m.HandleFunc("DELETE /templates/{templateID}", h.deleteTemplate)
}

func (h *Handler) owner(r *http.Request) string {
	k, _ := r.Context().Value(keyCtx{}).(string)
	return h.tmpl.ownerOf(k)
}

// templateName is the cove template an E2B name stands for: its tag
// (name:tag) dropped, as cove keeps one version.
func templateName(s string) (string, error) {
	n, _, _ := strings.Cut(s, ":")
	if !tmplNameRe.MatchString(n) {
		return "", fmt.Errorf("template name %q: cove's are 1-40 letters, digits, '_' or '-'", s)
	}
	return n, nil
}

func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// requestBuild is POST /v3/templates: a build is opened, waiting for its
// uploads and steps.
func (h *Handler) requestBuild(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name     string   `json:"name"`
		Alias    string   `json:"alias"`
		Tags     []string `json:"tags"`
		CPUCount int      `json:"cpuCount"`
		MemoryMB int      `json:"memoryMB"`
	}
	if err := decode(r, &req); err != nil {
		h.badRequest(w, err)
		return
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	name, err := templateName(req.Name)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	b := &build{owner: h.owner(r), id: randomID(), name: name, cpus: req.CPUCount, mem: req.MemoryMB,
		expires: time.Now().Add(buildTTL), uploads: map[string]string{}, status: "waiting"}
	t := h.tmpl
	t.mu.Lock()
	t.sweep(time.Now())
	t.builds[b.id] = b
	t.mu.Unlock()
	tags := req.Tags
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": b.id, "public": false,
		"names": []string{name}, "aliases": []string{name}, "tags": tags})
}

// uploadLink is GET /templates/{id}/files/{hash}: a signed link to the
// facade itself, valid for uploadTTL, for that build's files of that hash.
func (h *Handler) uploadLink(w http.ResponseWriter, r *http.Request) {
	tmpl, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !hashRe.MatchString(hash) {
		writeErr(w, http.StatusBadRequest, "files hash must be hex")
		return
	}
	t := h.tmpl
	owner := h.owner(r)
	t.mu.Lock()
	// The link names the caller's latest waiting build of the template:
	// the SDK asks for links between its request and its trigger.
	var b *build
	for _, c := range t.builds {
		if c.owner == owner && c.name == tmpl && c.status == "waiting" && (b == nil || c.expires.After(b.expires)) {
			b = c
		}
	}
	present := b != nil && b.uploads[hash] != ""
	t.mu.Unlock()
	if b == nil {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no build of template %s waiting for files", tmpl))
		return
	}
	exp := time.Now().Add(uploadTTL).Unix()
	u := url.URL{Scheme: "http", Host: r.Host, Path: uploadPrefix + b.id + "/" + hash,
		RawQuery: url.Values{"exp": {strconv.FormatInt(exp, 10)}, "sig": {t.sign(b.id, hash, exp)}}.Encode()}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	writeJSON(w, http.StatusOK, map[string]any{"present": present, "url": u.String()})
}

// upload is the PUT to an upload link: the COPY's archive, spooled to a
// temporary file until the build has read it.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		writeErr(w, http.StatusMethodNotAllowed, "upload links take PUT")
		return
	}
	buildID, hash, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, uploadPrefix), "/")
	exp, err := strconv.ParseInt(r.URL.Query().Get("exp"), 10, 64)
	t := h.tmpl
	if !ok || err != nil || !hashRe.MatchString(hash) ||
		!hmac.Equal([]byte(r.URL.Query().Get("sig")), []byte(t.sign(buildID, hash, exp))) {
		writeErr(w, http.StatusForbidden, "upload link not valid")
		return
	}
	if time.Now().Unix() > exp {
		writeErr(w, http.StatusForbidden, "upload link expired")
		return
	}
	f, err := os.CreateTemp("", "cove-e2b-upload-*")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	n, err := io.Copy(f, io.LimitReader(r.Body, maxUpload+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || n > maxUpload {
		os.Remove(f.Name())
		if err == nil {
			writeErr(w, http.StatusRequestEntityTooLarge, "upload too large")
			return
		}
		writeErr(w, http.StatusBadRequest, "upload: "+err.Error())
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.builds[buildID]
	if b == nil || b.status != "waiting" {
		os.Remove(f.Name())
		writeErr(w, http.StatusNotFound, "no build waiting for this upload")
		return
	}
	if old := b.uploads[hash]; old != "" {
		os.Remove(old)
	}
	b.uploads[hash] = f.Name()
	w.WriteHeader(http.StatusOK)
}

// buildSpec is E2B's TemplateBuildStartV2, the fields cove serves.
type buildSpec struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
	Steps             []buildStep     `json:"steps"`
}

type buildStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
}

// dockerfile turns the SDK's steps into cove's Dockerfile; from is the
// FROM reference (the base template resolved by the caller). COPY's
// sources are read from ctxDir(hash)/ in the build context.
func dockerfile(from string, s buildSpec) (string, error) {
	if len(s.FromImageRegistry) > 0 && string(s.FromImageRegistry) != "null" {
		return "", fmt.Errorf("fromImage registry credentials: %w (pull the image into cove first: cove image pull)", errStep)
	}
	var df strings.Builder
	fmt.Fprintf(&df, "FROM %s\n", from)
	user := "" // the user steps run as ("": the image's, root)
	for i, st := range s.Steps {
		arg := func(n int) string {
			if n < len(st.Args) {
				return st.Args[n]
			}
			return ""
		}
		for _, a := range st.Args {
			if strings.ContainsAny(a, "\n\r") && st.Type != "RUN" {
				return "", fmt.Errorf("step %d (%s): %w: a newline in %q", i+1, st.Type, errStep, a)
			}
		}
		switch st.Type {
		case "RUN":
			if arg(0) == "" {
				return "", fmt.Errorf("step %d: RUN without a command", i+1)
			}
			cmd, _ := json.Marshal([]string{"/bin/sh", "-c", arg(0)})
			if u := arg(1); u != "" && u != user {
				fmt.Fprintf(&df, "USER %s\nRUN %s\nUSER %s\n", u, cmd, orRoot(user))
			} else {
				fmt.Fprintf(&df, "RUN %s\n", cmd)
			}
		case "COPY":
			src, dest := arg(0), arg(1)
			if src == "" || dest == "" {
				return "", fmt.Errorf("step %d: COPY needs a source and a destination", i+1)
			}
			if !hashRe.MatchString(st.FilesHash) {
				return "", fmt.Errorf("step %d: COPY without a files hash", i+1)
			}
			if arg(3) != "" {
				return "", fmt.Errorf("step %d: COPY mode %s: %w", i+1, arg(3), errStep)
			}
			clean := path.Clean("/" + src)[1:]
			if clean == "" {
				clean = "."
			}
			chown := ""
			if u := arg(2); u != "" {
				chown = "--chown=" + u + " "
			} else if user != "" {
				chown = "--chown=" + user + " "
			}
			j, _ := json.Marshal([]string{path.Join(ctxDir(st.FilesHash), clean), dest})
			fmt.Fprintf(&df, "COPY %s%s\n", chown, j)
		case "ENV":
			if len(st.Args)%2 != 0 {
				return "", fmt.Errorf("step %d: ENV needs key, value pairs", i+1)
			}
			var kv []string
			for j := 0; j < len(st.Args); j += 2 {
				if !envKeyRe.MatchString(st.Args[j]) {
					return "", fmt.Errorf("step %d: ENV name %q", i+1, st.Args[j])
				}
				kv = append(kv, st.Args[j]+"="+quoteEnv(st.Args[j+1]))
			}
			if len(kv) > 0 {
				fmt.Fprintf(&df, "ENV %s\n", strings.Join(kv, " "))
			}
		case "WORKDIR":
			if arg(0) == "" {
				return "", fmt.Errorf("step %d: WORKDIR without a directory", i+1)
			}
			fmt.Fprintf(&df, "WORKDIR %s\n", arg(0))
		case "USER":
			if arg(0) == "" {
				return "", fmt.Errorf("step %d: USER without a user", i+1)
			}
			user = arg(0)
			fmt.Fprintf(&df, "USER %s\n", user)
		default:
			return "", fmt.Errorf("step %d: %s: %w", i+1, st.Type, errStep)
		}
	}
	return df.String(), nil
}

func orRoot(u string) string {
	if u == "" {
		return "root"
	}
	return u
}

// ctxDir is where a COPY's files sit in the build context.
func ctxDir(hash string) string { return "e2b-files/" + strings.ToLower(hash) }

// quoteEnv is v as a Dockerfile ENV value: double-quoted, with what the
// parser would expand escaped.
func quoteEnv(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

// triggerBuild is POST /v2/templates/{id}/builds/{buildID}: the steps
// arrive, the build starts as the caller and runs on after the answer.
func (h *Handler) triggerBuild(w http.ResponseWriter, r *http.Request) {
	var spec buildSpec
	if err := decode(r, &spec); err != nil {
		h.badRequest(w, err)
		return
	}
	t := h.tmpl
	t.mu.Lock()
	b := t.get(h.owner(r), r.PathValue("templateID"), r.PathValue("buildID"))
	ok := b != nil && b.status == "waiting"
	t.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no waiting build %s of template %s", r.PathValue("buildID"), r.PathValue("templateID")))
		return
	}
	api := h.api(r)
	from, err := h.baseImage(r.Context(), api, spec)
	if err != nil {
		h.stepErr(w, r, err)
		return
	}
	df, err := dockerfile(from, spec)
	if err != nil {
		h.stepErr(w, r, err)
		return
	}
	t.mu.Lock()
	for _, st := range spec.Steps {
		if st.Type == "COPY" && b.uploads[st.FilesHash] == "" {
			t.mu.Unlock()
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("COPY %s: its files (hash %s) were not uploaded", strings.Join(st.Args, " "), st.FilesHash))
			return
		}
	}
	b.status = "building"
	b.log("info", "cove: building template "+b.name+" from its Dockerfile")
	t.mu.Unlock()
	go h.runBuild(b, api, df, spec)
	w.WriteHeader(http.StatusAccepted)
}

func (h *Handler) stepErr(w http.ResponseWriter, r *http.Request, err error) {
	var ce *client.Error
	if errors.As(err, &ce) {
		h.fail(w, r, err)
		return
	}
	writeErr(w, http.StatusBadRequest, err.Error())
}

// baseImage is the FROM of a build: fromTemplate "base" is cove's
// default image, fromImage an image reference as cove resolves it.
func (h *Handler) baseImage(ctx context.Context, api *client.Client, s buildSpec) (string, error) {
	switch {
	case s.FromImage != "" && s.FromTemplate != "":
		return "", errors.New("fromImage and fromTemplate both set")
	case s.FromImage != "":
		return s.FromImage, nil
	case s.FromTemplate == "" || s.FromTemplate == DefaultTemplate:
		info, err := api.Info(ctx)
		if err != nil {
			return "", err
		}
		if info.DefaultImage == "" {
			return "", errors.New("the daemon reports no default image for template base")
		}
		return "cove:" + info.DefaultImage, nil
	default:
		return "", fmt.Errorf("fromTemplate(%q): %w: cove builds templates FROM images; use fromTemplate('base') (cove's default image) or fromImage", s.FromTemplate, errStep)
	}
}

// runBuild builds the template with cove's API and records its progress
// as the SDK's log entries.
func (h *Handler) runBuild(b *build, api *client.Client, df string, spec buildSpec) {
	t := h.tmpl
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	t.mu.Lock()
	uploads := make(map[string]string, len(b.uploads))
	for k, v := range b.uploads {
		uploads[k] = v
	}
	t.mu.Unlock()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, df, uploads)) }()
	info, err := api.BuildTemplate(ctx, client.TemplateBuild{Name: b.name, Start: spec.StartCmd, Ready: spec.ReadyCmd,
		CPUs: b.cpus, MemoryMiB: b.mem, Context: pr}, func(ev apitype.TemplateBuildEvent) {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, m := range progressLines(ev) {
			b.log("info", m)
		}
	})
	pr.CloseWithError(errors.New("build ended"))
	t.mu.Lock()
	defer t.mu.Unlock()
	b.dropUploads()
	b.expires = time.Now().Add(buildTTL)
	if err != nil {
		b.status, b.reason = "error", err.Error()
		b.log("error", err.Error())
		h.cfg.Logger.Info("e2b: template build failed", "template", b.name, "err", err)
		return
	}
	b.status = "ready"
	msg := fmt.Sprintf("cove: template %s built in %d ms", info.Name, info.BuildMs)
	if info.Cached {
		msg += " (every step cached)"
	}
	b.log("info", msg)
}

// progressLines are a build event as log messages.
func progressLines(ev apitype.TemplateBuildEvent) []string {
	var out []string
	if s := ev.Step; s != nil {
		m := fmt.Sprintf("[%d/%d] %s", s.N, s.Total, s.Text)
		if s.Cached {
			m += " (cached)"
		}
		out = append(out, m)
	}
	if ev.Output != "" {
		sc := bufio.NewScanner(strings.NewReader(ev.Output))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			out = append(out, sc.Text())
		}
	}
	return out
}

// writeContext writes the build context: the Dockerfile, and each
// upload's files under ctxDir(hash).
func writeContext(w io.Writer, df string, uploads map[string]string) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, df); err != nil {
		return err
	}
	for hash, p := range uploads {
		if err := copyUpload(tw, ctxDir(hash), p); err != nil {
			return fmt.Errorf("files %s: %w", hash, err)
		}
	}
	return tw.Close()
}

// copyUpload adds an uploaded archive (tar, gzipped or not) under dir.
func copyUpload(tw *tar.Writer, dir, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the upload: %w", err)
		}
		name, ok := inside(hd.Name)
		if !ok {
			return fmt.Errorf("upload entry %q leaves its directory", hd.Name)
		}
		switch hd.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			continue // hard links, devices: not files a COPY carries
		}
		hd.Name = path.Join(dir, name)
		if hd.Typeflag == tar.TypeDir {
			hd.Name += "/"
		}
		if err := tw.WriteHeader(hd); err != nil {
			return err
		}
		if hd.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
	}
}

// inside is a tar entry's name made relative, and whether it stays inside.
func inside(name string) (string, bool) {
	for _, e := range strings.Split(name, "/") {
		if e == ".." {
			return "", false
		}
	}
	c := path.Clean("/" + name)[1:]
	return c, c != ""
}

// buildStatus is GET /templates/{id}/builds/{buildID}/status: the
// build's state and its log entries from logsOffset on.
func (h *Handler) buildStatus(w http.ResponseWriter, r *http.Request) {
	off, _ := strconv.Atoi(r.URL.Query().Get("logsOffset"))
	t := h.tmpl
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.get(h.owner(r), r.PathValue("templateID"), r.PathValue("buildID"))
	if b == nil {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no build %s of template %s", r.PathValue("buildID"), r.PathValue("templateID")))
		return
	}
	off = max(0, min(off, len(b.logs)))
	entries := append([]logEntry{}, b.logs[off:]...)
	logs := make([]string, len(entries))
	for i, e := range entries {
		logs[i] = e.Message
	}
	out := map[string]any{"templateID": b.name, "buildID": b.id, "status": b.status, "logEntries": entries, "logs": logs}
	if b.status == "error" {
		out["reason"] = map[string]any{"message": b.reason, "logEntries": []logEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
}

// templateAlias is GET /templates/aliases/{alias} (Template.exists).
func (h *Handler) templateAlias(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("alias")
	if _, err := h.api(r).GetTemplate(r.Context(), name); err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": name, "public": false})
}

// templateItem is E2B's Template in a list.
type templateItem struct {
	TemplateID  string   `json:"templateID"`
	BuildID     string   `json:"buildID"`
	CPUCount    int      `json:"cpuCount"`
	MemoryMB    int      `json:"memoryMB"`
	DiskSizeMB  int64    `json:"diskSizeMB"`
	Public      bool     `json:"public"`
	Aliases     []string `json:"aliases"`
	Names       []string `json:"names"`
	CreatedAt   string   `json:"createdAt"`
	UpdatedAt   string   `json:"updatedAt"`
	BuildStatus string   `json:"buildStatus"`
	EnvdVersion string   `json:"envdVersion"`
}

// listTemplates is GET /templates: the caller's cove templates.
func (h *Handler) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := h.api(r).ListTemplates(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := make([]templateItem, 0, len(ts))
	for _, t := range ts {
		at := time.Unix(t.CreatedAtUnix, 0).UTC().Format(time.RFC3339)
		out = append(out, templateItem{TemplateID: t.Name, BuildID: t.Digest, DiskSizeMB: t.SizeBytes >> 20,
			Aliases: []string{t.Name}, Names: []string{t.Name}, CreatedAt: at, UpdatedAt: at,
			BuildStatus: "ready", EnvdVersion: h.cfg.EnvdVersion})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate is DELETE /templates/{id}: a cove template, or else a
// snapshot (Sandbox.deleteSnapshot calls the same route).
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("templateID")
	api := h.api(r)
	err := api.DeleteTemplate(r.Context(), id)
	if errors.Is(err, client.ErrNotFound) {
		err = api.DeleteSnapshot(r.Context(), id)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
