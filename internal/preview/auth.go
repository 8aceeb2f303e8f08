package preview

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// TokenHeader carries a port's token, for programs.
const TokenHeader = "X-Cove-Preview-Token"

const (
	// tokenParam carries a port's token in a URL, for browsers: the proxy
	// trades it for a cookie at once.
	tokenParam = "token"
	// cookiePrefix starts the name of every cookie the proxy sets; none of
	// them reaches a guest.
	cookiePrefix = "cove_preview_"
)

// CookieName is the cookie that holds port's token on sandbox id's host.
func CookieName(id string, port int) string {
	return cookiePrefix + strconv.Itoa(port) + "_" + id
}

// authorize checks r against the port's token and strips cove's own
// credentials from it, so they never reach the guest. It reports whether
// to proxy r; if not, it has answered.
//
// A token in the URL is traded for a cookie scoped to this host: a GET or
// HEAD is redirected to the same URL without it (so it leaves the address
// bar and the history), any other request (a POST, a WebSocket) is proxied
// with the cookie set on its response.
func authorize(w http.ResponseWriter, r *http.Request, id string, port int, token string, public bool) bool {
	name := CookieName(id, port)
	header := r.Header.Get(TokenHeader)
	var cookie string
	if c, err := r.Cookie(name); err == nil {
		cookie = c.Value
	}
	query, inURL, tried := cutToken(r.URL.RawQuery, token)
	r.URL.RawQuery = query
	stripCredentials(r)

	switch {
	case public:
		return true
	case inURL:
		setCookie(w, r, name, token)
		// A WebSocket follows no redirect, so an upgrade is served at once.
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Upgrade") == "" {
			// Not http.Redirect, which would clean the path the app is given.
			w.Header().Set("Location", redirectTarget(r))
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusFound)
			return false
		}
		return true
	case tokenEqual(header, token), tokenEqual(cookie, token):
		return true
	}
	msg := fmt.Sprintf("Port %d of sandbox %s needs its token: the %s header, or ?%s= in the URL.",
		port, id, TokenHeader, tokenParam)
	if header != "" || cookie != "" || tried {
		msg = fmt.Sprintf("Wrong token for port %d of sandbox %s.", port, id)
	}
	page(w, http.StatusUnauthorized, "Unauthorized", msg)
	return false
}

// tokenEqual compares in constant time; an empty token matches nothing.
func tokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// cutToken removes every token parameter equal to token from the raw
// query, and says whether it found one and whether there was any token
// parameter at all. An app's own ?token= passes through, and the rest of the
// query keeps its order and encoding.
func cutToken(raw, token string) (rest string, found, tried bool) {
	if raw == "" {
		return "", false, false
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, part := range parts {
		k, v, _ := strings.Cut(part, "=")
		if k, err := url.QueryUnescape(k); err == nil && k == tokenParam {
			tried = true
			if v, err := url.QueryUnescape(v); err == nil && tokenEqual(v, token) {
				found = true
				continue
			}
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&"), found, tried
}

// stripCredentials removes cove's header and cookies from r. Other cookies
// are kept as the client sent them, byte for byte.
func stripCredentials(r *http.Request) {
	r.Header.Del(TokenHeader)
	lines := r.Header.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for _, c := range strings.Split(line, ";") {
			c = strings.TrimSpace(c)
			if c != "" && !strings.HasPrefix(c, cookiePrefix) {
				kept = append(kept, c)
			}
		}
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
}

// setCookie gives the browser the port's token: host-only (no Domain, so
// no other sandbox's host sees it), HttpOnly, and Secure over HTTPS.
func setCookie(w http.ResponseWriter, r *http.Request, name, token string) {
	http.SetCookie(w, &http.Cookie{
		Name:     name,
		Value:    token,
		Path:     "/",
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
}

// redirectTarget is r's path and remaining query, relative to its own host.
// A path starting "//" would read as another host, so it is kept a path.
func redirectTarget(r *http.Request) string {
	loc := r.URL.EscapedPath()
	if loc == "" {
		loc = "/"
	}
	if strings.HasPrefix(loc, "//") {
		loc = "/." + loc
	}
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	return loc
}
