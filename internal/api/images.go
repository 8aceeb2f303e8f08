package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// ImageStore is the daemon's image store, for the /v1/images routes.
type ImageStore struct {
	Dir string
	// Agent is the cove-agent binary imports add; "" takes the one in the
	// default image, which is what the daemon's sandboxes run.
	Agent string
	// VM makes imports carry the QEMU backend's artifacts.
	VM bool
	// Default is the daemon's default image name: deleting it is refused.
	Default string
	// MaxBytes bounds an import's upload and unpacked content (0: the
	// image package's default).
	MaxBytes int64
}

func (s *Server) imageRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /v1/images", s.auth(s.importImage))
	m.HandleFunc("GET /v1/images", s.auth(s.listImages))
	m.HandleFunc("GET /v1/images/{name}", s.auth(s.getImage))
	m.HandleFunc("DELETE /v1/images/{name}", s.auth(s.deleteImage))
}

// imageErr gives the image package's errors the API's sentinels.
func imageErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, image.ErrNotFound):
		return fmt.Errorf("%w: %w", sandbox.ErrNotFound, err)
	case errors.Is(err, image.ErrBadImage), errors.Is(err, image.ErrInvalidName):
		return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	case errors.Is(err, image.ErrCurrent):
		return fmt.Errorf("%w: %w", sandbox.ErrConflict, err)
	case errors.Is(err, image.ErrTooLarge):
		return fmt.Errorf("%w: %w", sandbox.ErrTooLarge, err)
	}
	return err
}

func imageInfo(img image.Image) apitype.ImageInfo {
	m := img.Manifest
	info := apitype.ImageInfo{
		ID: img.ID, Name: img.Name, Current: img.Current, CreatedAtUnix: m.Created.Unix(), SizeBytes: m.SizeBytes,
		VM: image.VMFilesFor(img.Rootfs).Exists(), Source: m.Source, Digest: m.Digest,
	}
	if c := m.Config; c != nil {
		info.Config = &apitype.ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	}
	return info
}

// importImage serves POST /v1/images?name=N[&ref=REF]: the body is the
// archive unless ref is given. With Accept: application/x-ndjson the
// answer streams progress lines, then the image.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := image.ImportOptions{Name: q.Get("name"), Ref: q.Get("ref"), VM: s.cfg.Images.VM, MaxBytes: s.cfg.Images.MaxBytes, Logger: s.log}
	if o.Name == "" {
		s.fail(w, r, fmt.Errorf("%w: name is required (POST /v1/images?name=NAME)", sandbox.ErrInvalid))
		return
	}
	if o.Name == s.defaultImage() {
		// It would become what every sandbox without an image boots.
		s.fail(w, r, fmt.Errorf("%w: %q is the daemon's default image: import under another name", sandbox.ErrConflict, o.Name))
		return
	}
	if o.Ref == "" {
		o.Reader = r.Body
	}
	agent, err := s.importAgent()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o.Agent = agent
	if !wantsStream(r) {
		img, err := image.Import(r.Context(), s.cfg.Images.Dir, o)
		if err != nil {
			s.fail(w, r, imageErr(err))
			return
		}
		writeJSON(w, http.StatusCreated, imageInfo(img))
		return
	}
	es := &importStream{es: newEventStream(w, r)}
	o.Progress = es
	img, err := image.Import(r.Context(), s.cfg.Images.Dir, o)
	if err = imageErr(err); err != nil {
		status, code := errStatus(err)
		s.logFailure(r, status, err)
		es.send(apitype.ImageImportEvent{Error: &apitype.ErrorBody{Error: err.Error(), Code: code}})
		return
	}
	info := imageInfo(img)
	es.send(apitype.ImageImportEvent{Image: &info})
}

// defaultImage is the daemon's default image name.
func (s *Server) defaultImage() string {
	if s.cfg.Images.Default != "" {
		return s.cfg.Images.Default
	}
	return image.DefaultName
}

// importAgent is the agent binary imports add.
func (s *Server) importAgent() (string, error) {
	if s.cfg.Images.Agent != "" {
		return s.cfg.Images.Agent, nil
	}
	agent, err := image.DefaultAgent(s.cfg.Images.Dir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	return agent, nil
}

// importStream sends each progress line as an event. The import's
// heartbeat writes from its own goroutine.
type importStream struct {
	mu sync.Mutex
	es *eventStream
}

func (p *importStream) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		// The client's going away cancels the request, and so the import.
		p.send(apitype.ImageImportEvent{Output: line})
	}
	return len(b), nil
}

func (p *importStream) send(ev apitype.ImageImportEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.es.send(ev)
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := image.List(s.cfg.Images.Dir)
	if err != nil {
		s.fail(w, r, imageErr(image.ScrubPath(err, s.cfg.Images.Dir)))
		return
	}
	out := make([]apitype.ImageInfo, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, imageInfo(img))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	img, err := image.Resolve(s.cfg.Images.Dir, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, imageErr(image.ScrubPath(err, s.cfg.Images.Dir)))
		return
	}
	writeJSON(w, http.StatusOK, imageInfo(img))
}

// deleteImage serves DELETE /v1/images/{name}: a name and all its images,
// or one image by id. An image a sandbox or snapshot uses is refused.
func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	dir, name := s.cfg.Images.Dir, r.PathValue("name")
	if name == s.defaultImage() {
		s.fail(w, r, fmt.Errorf("%w: %q is the daemon's default image", sandbox.ErrConflict, name))
		return
	}
	ids, err := image.IDsOf(dir, name)
	if err != nil {
		s.fail(w, r, imageErr(image.ScrubPath(err, dir)))
		return
	}
	if err := s.imageInUse(ids); err != nil {
		s.fail(w, r, err)
		return
	}
	removed, err := image.RemoveName(r.Context(), dir, name)
	if err != nil {
		s.fail(w, r, imageErr(err))
		return
	}
	writeJSON(w, http.StatusOK, apitype.DeleteImageResponse{Removed: removed})
}

// imageInUse refuses ids that a sandbox runs from or a snapshot was taken
// of: deleting the files under them would break their next start.
func (s *Server) imageInUse(ids []string) error {
	// Images are the daemon's, whoever's sandboxes run on them.
	for _, sb := range s.svc.List(context.Background()) {
		if slices.Contains(ids, sb.Image) {
			return fmt.Errorf("%w: image %s is in use by sandbox %s: kill it first", sandbox.ErrConflict, sb.Image, sb.ID)
		}
	}
	for _, sn := range s.svc.Snapshots(context.Background()) {
		if slices.Contains(ids, sn.Image) {
			return fmt.Errorf("%w: image %s is in use by snapshot %q: delete it first", sandbox.ErrConflict, sn.Image, sn.Tag)
		}
	}
	return nil
}
