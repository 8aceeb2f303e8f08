package envd

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/pkg/client"
)

// Signature computes an envd URL signature as the SDK does: "v1_" and the
// unpadded base64 SHA-256 of path:operation:user:token, with :expiry (unix
// seconds) when it expires.
func Signature(p, operation, user, token string, expiry int64) string {
	raw := p + ":" + operation + ":" + user + ":" + token
	if expiry != 0 {
		raw += ":" + strconv.FormatInt(expiry, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// httpError answers as envd does: {"code": status, "message": ...}.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

// failHTTP answers a cove error with its status.
func failHTTP(w http.ResponseWriter, err error) {
	var ce *client.Error
	status := http.StatusInternalServerError
	if errors.As(err, &ce) && ce.Status >= 400 {
		status = ce.Status
		if status == http.StatusForbidden {
			status = http.StatusUnauthorized // envd's answer for a token it does not take
		}
	}
	httpError(w, status, err.Error())
}

// fileTarget resolves a /files request: its sandbox, and its token from
// X-Access-Token or, for a signed URL, from Config.Token once the
// signature checks out.
func (s *Server) fileTarget(w http.ResponseWriter, r *http.Request, operation string) (target, string, bool) {
	q := r.URL.Query()
	id := strings.TrimSpace(r.Header.Get(HeaderSandboxID))
	if id == "" {
		httpError(w, http.StatusBadRequest, errNoSandbox.Error())
		return target{}, "", false
	}
	user := q.Get("username")
	signedUser := user
	if user == "" {
		user = s.cfg.DefaultUser
	}
	tok := r.Header.Get(HeaderAccessToken)
	if tok == "" {
		sig := q.Get("signature")
		if sig == "" {
			httpError(w, http.StatusUnauthorized, "no "+HeaderAccessToken+" header and no signature")
			return target{}, "", false
		}
		var ok bool
		if tok, ok = s.checkSignature(r.Context(), id, q.Get("path"), operation, signedUser, sig, q.Get("signature_expiration")); !ok {
			httpError(w, http.StatusUnauthorized, "the signature is not valid, or has expired")
			return target{}, "", false
		}
	}
	c, err := s.cfg.Client(r.Context(), id)
	if err != nil {
		failHTTP(w, err)
		return target{}, "", false
	}
	home, err := s.homeFor(r.Context(), c, id, user)
	if err != nil {
		failHTTP(w, err)
		return target{}, "", false
	}
	p := q.Get("path")
	if p == "" && operation == "read" {
		httpError(w, http.StatusBadRequest, "no path")
		return target{}, "", false
	}
	if p != "" {
		var perr error
		if p, perr = resolvePath(p, home); perr != nil {
			httpError(w, http.StatusBadRequest, perr.Error())
			return target{}, "", false
		}
	}
	return target{c: c, id: id, token: tok, user: user, home: home}, p, true
}

// checkSignature returns the sandbox's token if sig signs this request
// with it and has not expired.
func (s *Server) checkSignature(ctx context.Context, id, p, operation, user, sig, exp string) (string, bool) {
	if s.cfg.Token == nil {
		return "", false
	}
	tok, ok := s.cfg.Token(ctx, id)
	if !ok || tok == "" {
		return "", false
	}
	var expiry int64
	if exp != "" {
		var err error
		if expiry, err = strconv.ParseInt(exp, 10, 64); err != nil || time.Now().Unix() > expiry {
			return "", false
		}
	}
	// The SDK signs the path and user as it sends them ("" for none).
	want := Signature(p, operation, user, tok, expiry)
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return "", false
	}
	return tok, true
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	t, p, ok := s.fileTarget(w, r, "read")
	if !ok {
		return
	}
	body, fi, err := t.c.GetFile(r.Context(), t.id, t.token, p)
	if err != nil {
		failHTTP(w, err)
		return
	}
	defer body.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		out = gz
	} else if fi.Size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(out, body); err != nil {
		s.log.Debug("envd: a download ended early", "sandbox", t.id, "path", p, "err", err)
	}
}

func acceptsGzip(ae string) bool {
	for _, part := range strings.Split(ae, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

// uploaded is envd's answer for each file written.
type uploaded struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) postFile(w http.ResponseWriter, r *http.Request) {
	t, p, ok := s.fileTarget(w, r, "write")
	if !ok {
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "the gzip body does not read: "+err.Error())
			return
		}
		defer gz.Close()
		body = gz
	}
	put := func(dst string, src io.Reader, size int64) (uploaded, error) {
		fi, err := t.c.PutFileAs(r.Context(), t.id, t.token, dst, 0o644, t.user, src, size)
		if err != nil {
			return uploaded{}, err
		}
		return uploaded{Name: path.Base(fi.Path), Type: "file", Path: fi.Path}, nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploaded
	switch {
	case mt == "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				httpError(w, http.StatusBadRequest, "the multipart body does not read: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dst := p
			if dst == "" || len(out) > 0 {
				// Without a path, or past the first file, each part names
				// its own (relative to the user's home) as its filename:
				// the whole path, which Part.FileName would cut to a base.
				name := partFileName(part)
				if dst, err = resolvePath(name, t.home); err != nil || name == "" {
					httpError(w, http.StatusBadRequest, "a file part without a path")
					return
				}
			}
			u, err := put(dst, part, -1)
			part.Close()
			if err != nil {
				failHTTP(w, err)
				return
			}
			out = append(out, u)
		}
	default: // application/octet-stream (0.5.7), or no type
		if p == "" {
			httpError(w, http.StatusBadRequest, "no path")
			return
		}
		size := r.ContentLength
		if body != io.Reader(r.Body) {
			size = -1
		}
		u, err := put(p, body, size)
		if err != nil {
			failHTTP(w, err)
			return
		}
		out = append(out, u)
	}
	if out == nil {
		httpError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(out)
}

// partFileName is a part's filename parameter as sent.
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}
