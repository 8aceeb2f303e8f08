package fakedaemon

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

// fileRoutes serves PUT and GET /v1/sandboxes/{id}/files from memory,
// with the sandbox's token; they carry raw bytes, not JSON.
func (f *Daemon) fileRoutes() {
	f.mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeJSON(w, 400, apitype.ErrorBody{Error: err.Error(), Code: apitype.CodeBadRequest})
			return
		}
		f.withFileSandbox(w, r, func(sb *sandbox, path string) {
			sb.files[path] = body
			writeJSON(w, 200, apitype.FileInfo{Path: path, Type: "file", Size: int64(len(body))})
		})
	})
	f.mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.withFileSandbox(w, r, func(sb *sandbox, path string) {
			b, ok := sb.files[path]
			if !ok {
				writeJSON(w, 404, apitype.ErrorBody{Error: "no file " + path, Code: apitype.CodeNotFound})
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(b)
		})
	})
}

// withFileSandbox calls h, under the lock, with the sandbox the path
// names and the file path the query names, after checking the token.
func (f *Daemon) withFileSandbox(w http.ResponseWriter, r *http.Request, h func(*sandbox, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sandboxes[r.PathValue("id")]
	switch {
	case sb == nil:
		writeJSON(w, 404, apitype.ErrorBody{Error: "no sandbox " + r.PathValue("id"), Code: apitype.CodeNotFound})
	case r.Header.Get(apitype.SandboxTokenHeader) != sb.info.Token:
		writeJSON(w, 403, apitype.ErrorBody{Error: "wrong token for sandbox " + sb.info.ID, Code: apitype.CodeForbidden})
	default:
		h(sb, r.URL.Query().Get("path"))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
