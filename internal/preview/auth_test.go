package preview

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestAuth(t *testing.T) {
	h := newHarness(t, map[string]exposure{
		"sb-x/3000": {token: testToken},
		"sb-x/8000": {public: true, token: testToken},
		"sb-x/9000": {token: ""}, // a private port without a token admits nothing
	})
	cookie := CookieName("sb-x", 3000)
	for _, tc := range []struct {
		name     string
		method   string
		port     int
		path     string
		header   http.Header
		status   int
		location string // of a redirect
		setsCook bool   // answers with the port's cookie
		query    string // the upstream's query, on 200
		cookies  string // the upstream's Cookie header, on 200
	}{
		{name: "public", port: 8000, path: "/", status: 200},
		{name: "public strips cove's token", port: 8000, path: "/?token=" + testToken + "&a=1",
			header: http.Header{TokenHeader: {testToken}, "Cookie": {"a=1; " + CookieName("sb-x", 8000) + "=" + testToken}},
			status: 200, query: "a=1", cookies: "a=1"},
		{name: "none", port: 3000, path: "/", status: 401},
		{name: "header", port: 3000, path: "/", header: http.Header{TokenHeader: {testToken}}, status: 200},
		{name: "wrong header", port: 3000, path: "/", header: http.Header{TokenHeader: {testToken[1:] + "0"}}, status: 401},
		{name: "query redirects", port: 3000, path: "/app/x?a=1&token=" + testToken + "&b=%2F",
			status: 302, location: "/app/x?a=1&b=%2F", setsCook: true},
		{name: "query alone", port: 3000, path: "/?token=" + testToken, status: 302, location: "/", setsCook: true},
		{name: "query keeps the path as it is", port: 3000, path: "/a//b/../c%2Fd?token=" + testToken,
			status: 302, location: "/a//b/../c%2Fd", setsCook: true},
		{name: "query on HEAD", method: http.MethodHead, port: 3000, path: "/?token=" + testToken,
			status: 302, location: "/", setsCook: true},
		{name: "query keeps a path a path", port: 3000, path: "//evil.example/?token=" + testToken,
			status: 302, location: "/.//evil.example/", setsCook: true},
		{name: "query on POST is served", method: http.MethodPost, port: 3000, path: "/p?token=" + testToken + "&a=1",
			status: 200, setsCook: true, query: "a=1"},
		{name: "wrong query", port: 3000, path: "/?token=nope", status: 401},
		{name: "cookie", port: 3000, path: "/", header: http.Header{"Cookie": {cookie + "=" + testToken}}, status: 200},
		{name: "wrong cookie", port: 3000, path: "/", header: http.Header{"Cookie": {cookie + "=nope"}}, status: 401},
		{name: "another port's cookie", port: 3000, path: "/",
			header: http.Header{"Cookie": {CookieName("sb-x", 8000) + "=" + testToken}}, status: 401},
		{name: "app's own token and cookies pass", port: 3000, path: "/?token=app-secret",
			header: http.Header{TokenHeader: {testToken}, "Cookie": {"sid=\"a b\"; " + cookie + "=" + testToken + "; x=1"}},
			status: 200, query: "token=app-secret", cookies: "sid=\"a b\"; x=1"},
		{name: "empty token admits nothing", port: 9000, path: "/?token=",
			header: http.Header{TokenHeader: {""}, "Cookie": {CookieName("sb-x", 9000) + "="}}, status: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, h.url("sb-x", tc.port, tc.path), nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var s seen
			if tc.status == 200 && method != http.MethodHead {
				json.NewDecoder(resp.Body).Decode(&s)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			checkCookie(t, resp, tc.port, tc.setsCook)
			if tc.status == 200 && method != http.MethodHead {
				if s.Query != tc.query {
					t.Errorf("upstream query %q, want %q", s.Query, tc.query)
				}
				if got := s.Header.Get("Cookie"); got != tc.cookies {
					t.Errorf("upstream Cookie %q, want %q", got, tc.cookies)
				}
				if s.Header.Get(TokenHeader) != "" {
					t.Errorf("upstream got %s", TokenHeader)
				}
			}
		})
	}
	if h.up.sawText(testToken) {
		t.Error("the token reached the upstream")
	}
	if h.up.sawText(cookiePrefix) {
		t.Error("a cove cookie reached the upstream")
	}
}

// checkCookie checks the port's cookie is set, or not: the token, for this
// host only, HttpOnly, SameSite=Lax.
func checkCookie(t *testing.T, resp *http.Response, port int, want bool) {
	t.Helper()
	var set *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == CookieName("sb-x", port) {
			set = c
		}
	}
	if !want {
		if set != nil {
			t.Errorf("set cookie %v", set)
		}
		return
	}
	raw := resp.Header.Get("Set-Cookie")
	switch {
	case set == nil:
		t.Errorf("no cookie set: %q", raw)
	case set.Value != testToken, set.Domain != "", set.Path != "/", !set.HttpOnly,
		set.SameSite != http.SameSiteLaxMode, set.Secure:
		t.Errorf("cookie %q", raw)
	case strings.Contains(strings.ToLower(raw), "domain="):
		t.Errorf("cookie names a domain: %q", raw)
	}
}

// TestAuthFlow follows a browser: the ?token= link, then the cookie alone.
func TestAuthFlow(t *testing.T) {
	h := newHarness(t, map[string]exposure{"sb-x/3000": {token: testToken}})
	resp, _ := h.get(t, h.url("sb-x", 3000, "/page?token="+testToken), nil)
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	resp, body := h.get(t, loc.String(), http.Header{"Cookie": {cookie.Name + "=" + cookie.Value}})
	if resp.StatusCode != 200 || !strings.Contains(body, `"path":"/page"`) {
		t.Fatalf("after redirect to %s: %d %s", loc, resp.StatusCode, body)
	}
}

func TestRedirectTarget(t *testing.T) {
	for uri, want := range map[string]string{
		"/":                   "/",
		"/a?b=1":              "/a?b=1",
		"//evil.example/x":    "/.//evil.example/x",
		"/\\evil.example/x":   "/%5Cevil.example/x",
		"/%2F%2Fevil.example": "/%2F%2Fevil.example",
		"*":                   "*",
	} {
		r := httptest.NewRequest(http.MethodGet, "http://8000-sb-x.localhost", nil)
		r.URL = &url.URL{}
		u, err := url.ParseRequestURI(uri)
		if err == nil {
			r.URL = u
		} else {
			r.URL.Path = uri
		}
		if got := redirectTarget(r); got != want {
			t.Errorf("redirectTarget(%q) = %q, want %q", uri, got, want)
		}
	}
}

func TestCutToken(t *testing.T) {
	for _, tc := range []struct {
		raw, rest    string
		found, tried bool
	}{
		{"", "", false, false},
		{"a=1", "a=1", false, false},
		{"token=" + testToken, "", true, true},
		{"a=1&token=" + testToken + "&b=%20", "a=1&b=%20", true, true},
		{"to%6Ben=" + testToken, "", true, true},
		{"token=other", "token=other", false, true},
		{"token=other&token=" + testToken, "token=other", true, true},
		{"token", "token", false, true},
		{"a=%zz&token=" + testToken, "a=%zz", true, true},
	} {
		rest, found, tried := cutToken(tc.raw, testToken)
		if rest != tc.rest || found != tc.found || tried != tc.tried {
			t.Errorf("cutToken(%q) = %q, %v, %v; want %q, %v, %v", tc.raw, rest, found, tried, tc.rest, tc.found, tc.tried)
		}
	}
}
