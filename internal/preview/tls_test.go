package preview

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "preview-ca")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ca.PEMPath() != filepath.Join(dir, "ca.pem") {
		t.Errorf("PEMPath %q", ca.PEMPath())
	}
	c := ca.cert
	if !c.IsCA || c.Subject.CommonName != caName || c.PublicKeyAlgorithm != x509.ECDSA ||
		c.NotAfter.Sub(c.NotBefore) < 9*365*24*time.Hour {
		t.Errorf("CA %v %q %v %s..%s", c.IsCA, c.Subject.CommonName, c.PublicKeyAlgorithm, c.NotBefore, c.NotAfter)
	}
	for name, want := range map[string]os.FileMode{"ca-key.pem": 0o600, "ca.pem": 0o644, ".": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}

	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.cert.Equal(ca.cert) {
		t.Error("the CA was not reused")
	}
}

func TestLoadOrCreateCABroken(t *testing.T) {
	other := t.TempDir()
	if _, err := LoadOrCreateCA(other); err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(filepath.Join(other, "ca-key.pem"))
	for _, tc := range []struct {
		name      string
		cert, key string // file contents; "-" for no file
		err       string // "" for a new CA made
	}{
		{"cert without key", "x", "-", "has no key"},
		{"garbage cert", "x", "x", "no PEM certificate"},
		{"garbage key", "", "x", "no PEM private key"},
		{"another CA's key", "", string(otherKey), "is not the key of"},
		{"key without cert", "-", "x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ca, err := LoadOrCreateCA(dir)
			if err != nil {
				t.Fatal(err)
			}
			certPEM, _ := os.ReadFile(ca.PEMPath())
			for name, content := range map[string]string{"ca.pem": tc.cert, "ca-key.pem": tc.key} {
				p := filepath.Join(dir, name)
				switch content {
				case "-":
					os.Remove(p)
				case "":
					os.WriteFile(p, certPEM, 0o600) // the real certificate
				default:
					os.WriteFile(p, []byte(content), 0o600)
				}
			}
			before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
			_, err = LoadOrCreateCA(dir)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("no new CA: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(after) != string(before) {
				t.Error("a failed load changed ca.pem")
			}
		})
	}
}

func TestCertificate(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, tc := range []struct {
		domain string
		ok     []string
		bad    []string
	}{
		{"", []string{"8000-sb-x.localhost", "localhost"}, []string{"a.8000-sb-x.localhost", "example.com"}},
		{"Dev.Example.org", []string{"3000-sb-y.dev.example.org", "dev.example.org"}, []string{"x.example.org"}},
	} {
		cert, err := ca.Certificate(tc.domain)
		if err != nil {
			t.Fatal(err)
		}
		leaf := cert.Leaf
		if d := leaf.NotAfter.Sub(leaf.NotBefore); d < 360*24*time.Hour || d > 370*24*time.Hour {
			t.Errorf("%q: valid for %s", tc.domain, d)
		}
		if len(cert.Certificate) != 2 {
			t.Errorf("%q: chain of %d", tc.domain, len(cert.Certificate))
		}
		for _, name := range tc.ok {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
				t.Errorf("%q: %s: %v", tc.domain, name, err)
			}
		}
		for _, name := range tc.bad {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err == nil {
				t.Errorf("%q: %s verified", tc.domain, name)
			}
		}
		again, _ := ca.Certificate(tc.domain)
		if !again.Leaf.Equal(leaf) {
			t.Errorf("%q: issued again", tc.domain)
		}
	}
	for _, d := range []string{"*.localhost", "a..b", "-a.b", "a b", "1.2.3.4:80", strings.Repeat("a", 64)} {
		if _, err := ca.Certificate(d); err == nil {
			t.Errorf("Certificate(%q) did not fail", d)
		}
	}
}

// TestProxyTLS serves the proxy over HTTPS, with Certificate() and with
// GetCertificate, and reaches a preview host through it, trusting only the
// CA.
func TestProxyTLS(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Certificate("localhost")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cfg   *tls.Config
		names []string // the DNS names of the certificate served
	}{
		{"Certificate", &tls.Config{Certificates: []tls.Certificate{cert}}, []string{"*.localhost", "localhost"}},
		{"GetCertificate", &tls.Config{GetCertificate: ca.GetCertificate("localhost")},
			[]string{"8000-sb-x.localhost", "*.localhost", "localhost"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testProxyTLS(t, ca, tc.cfg, tc.names) })
	}
}

func testProxyTLS(t *testing.T, ca *CA, cfg *tls.Config, names []string) {
	up := newUpstream(t)
	p := New(Config{
		Backend: &fakeBackend{ports: map[string]exposure{
			"sb-x/8000": {addr: up.Listener.Addr().String(), token: testToken},
		}},
		Logger: slog.New(slog.DiscardHandler),
	})
	srv := httptest.NewUnstartedServer(p)
	srv.TLS = cfg
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()

	pem, err := os.ReadFile(ca.PEMPath())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("ca.pem holds no certificate")
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer client.CloseIdleConnections()
	url := "https://8000-sb-x.localhost:" + portOf(srv.Listener.Addr()) + "/tls"
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set(TokenHeader, testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.TLS == nil || resp.TLS.ServerName != "8000-sb-x.localhost" {
		t.Fatalf("TLS state %+v", resp.TLS)
	}
	if got := resp.TLS.PeerCertificates[0].DNSNames; !slices.Equal(got, names) {
		t.Errorf("served a certificate for %q, want %q", got, names)
	}
	var s seen
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if s.Path != "/tls" || s.Header.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("upstream saw %+v", s)
	}

	// A ?token= over HTTPS sets a Secure cookie.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err = client.Get(url + "?token=" + testToken)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if c := resp.Cookies(); resp.StatusCode != http.StatusFound || len(c) != 1 || !c[0].Secure {
		t.Errorf("%d %v", resp.StatusCode, resp.Header["Set-Cookie"])
	}

	// Without the CA the certificate is not trusted.
	plain := &http.Client{Transport: &http.Transport{DialContext: dial}}
	defer plain.CloseIdleConnections()
	if resp, err := plain.Get(url); err == nil {
		resp.Body.Close()
		t.Error("a client that does not trust the CA connected")
	}
}

func TestGetCertificate(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain, sni string
		names       []string
	}{
		{"localhost", "8000-sb-x.localhost", []string{"8000-sb-x.localhost", "*.localhost", "localhost"}},
		{"localhost", "8000-SB-X.localhost.", []string{"8000-sb-x.localhost", "*.localhost", "localhost"}},
		{"localhost", "localhost", []string{"*.localhost", "localhost"}},
		{"localhost", "", []string{"*.localhost", "localhost"}},
		{"localhost", "a.b.localhost", []string{"*.localhost", "localhost"}},
		{"localhost", "8000-sb_x.localhost", []string{"*.localhost", "localhost"}},
		{"dev.example.org", "8000-sb-x.dev.example.org", []string{"*.dev.example.org", "dev.example.org"}},
	} {
		get := ca.GetCertificate(tc.domain)
		c, err := get(&tls.ClientHelloInfo{ServerName: tc.sni})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Leaf.DNSNames, tc.names) {
			t.Errorf("%s, SNI %q: %q, want %q", tc.domain, tc.sni, c.Leaf.DNSNames, tc.names)
		}
		again, _ := get(&tls.ClientHelloInfo{ServerName: tc.sni})
		if again != c {
			t.Errorf("%s, SNI %q: issued again", tc.domain, tc.sni)
		}
	}
	// The cache of single hosts stays bounded.
	get := ca.GetCertificate("localhost")
	for i := range maxHostCerts + 10 {
		if _, err := get(&tls.ClientHelloInfo{ServerName: fmt.Sprintf("%d-sb-x.localhost", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	n := len(ca.hosts)
	ca.mu.Unlock()
	if n > maxHostCerts {
		t.Errorf("%d host certificates kept", n)
	}
}

func TestValidDomain(t *testing.T) {
	for d, want := range map[string]bool{
		"localhost": true, "preview.example.org": true, "a-b.c1": true,
		"": false, "*.localhost": false, "a..b": false, "-a.b": false, "a-.b": false, "a b": false,
		"Localhost": false, "a.b:80": false, strings.Repeat("a", 64): false,
	} {
		if got := ValidDomain(d); got != want {
			t.Errorf("ValidDomain(%q) = %v", d, got)
		}
	}
}
