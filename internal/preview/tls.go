package preview

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/internal/fsutil"
)

// CA is cove's local certificate authority for preview URLs over HTTPS,
// used when the operator gives no certificate of their own for
// *.<preview domain>: a server's tls.Config takes GetCertificate(domain).
// It issues certificates only in memory; only its own certificate and key
// are kept on disk.
//
// Clients trust it by its certificate, ca.pem in the CA's directory
// (PEMPath), never by its key:
//
//   - the host's store (Debian; curl, wget, Python's ssl and most tools read
//     it): cp ca.pem /usr/local/share/ca-certificates/cove-preview.crt &&
//     update-ca-certificates
//   - one program or SDK: NODE_EXTRA_CA_CERTS=ca.pem (Node, so the E2B JS
//     SDK), REQUESTS_CA_BUNDLE=ca.pem (Python requests), SSL_CERT_FILE=ca.pem
//     (Go, OpenSSL, httpx and so the E2B Python SDK; it replaces the
//     system's roots), or curl --cacert ca.pem
//   - a browser: import ca.pem as an authority in its certificate settings
//     (Chromium and Firefox on Linux keep their own store, not the host's).
//
// Trusting it lets whoever holds ca-key.pem (root on the daemon's host)
// vouch for any name to that client.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	pemPath string

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey           // of every certificate issued
	leaves  map[string]*tls.Certificate // by domain
	hosts   map[string]*tls.Certificate // by host, for GetCertificate
}

const (
	caName     = "cove local preview CA"
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
	caLifetime = 10 * 365 * 24 * time.Hour
	// leafLifetime is how long an issued certificate is valid; one is
	// issued again when less than leafRenew of it is left.
	leafLifetime = 365 * 24 * time.Hour
	leafRenew    = 30 * 24 * time.Hour
	// backdate covers clocks a little behind the daemon's.
	backdate = time.Hour
)

// LoadOrCreateCA loads the CA kept in dir (ca.pem, ca-key.pem), or creates
// one there: an ECDSA P-256 key, written 0600, and a certificate valid for
// ten years, so that clients that trust it keep trusting it across restarts.
// A key without its certificate (a creation cut short) is replaced; a
// certificate without its key is an error, since a new CA would silently
// break every client that trusts the old one.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		cert, key, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("preview CA in %s: %w", dir, err)
		}
		return newCA(cert, key, certPath), nil
	case certErr == nil && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("preview CA: %s has no key %s beside it; remove it to make a new CA (clients must then trust the new one)",
			certPath, keyPath)
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("preview CA: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("preview CA: %w", keyErr)
	}
	return createCA(dir, certPath, keyPath)
}

func createCA(dir, certPath, keyPath string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: caName, Organization: []string{"cove"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	// CreateCertificate picks a random serial and the key identifier.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	// The key first: a crash before the certificate is written leaves a
	// key alone, which the next start replaces.
	if err := fsutil.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	if err := fsutil.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("preview CA: %w", err)
	}
	return newCA(cert, key, certPath), nil
}

// parseCA checks that the files hold a CA certificate and its own key.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New(caCertFile + ": no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New(caCertFile + ": not a CA certificate")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, errors.New(caKeyFile + ": no PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New(caKeyFile + " is not the key of " + caCertFile)
	}
	return cert, key, nil
}

func newCA(cert *x509.Certificate, key crypto.Signer, pemPath string) *CA {
	return &CA{cert: cert, key: key, pemPath: pemPath,
		leaves: map[string]*tls.Certificate{}, hosts: map[string]*tls.Certificate{}}
}

// PEMPath is the CA's certificate, which clients are to trust.
func (ca *CA) PEMPath() string { return ca.pemPath }

// Certificate returns a certificate for "*.<domain>" and "<domain>" issued
// by the CA, with its chain, for a TLS server's Certificates. It is made
// once per domain and kept in memory, and made again as it nears its end.
//
// Go accepts "*.localhost" for 8000-ID.localhost, but OpenSSL (so curl and
// Python) and browsers take no wildcard right above a single-label name:
// for such a domain serve GetCertificate, which names each host exactly.
func (ca *CA) Certificate(domain string) (tls.Certificate, error) {
	c, err := ca.domainCertificate(normalizeDomain(domain))
	if err != nil {
		return tls.Certificate{}, err
	}
	return *c, nil
}

func (ca *CA) domainCertificate(domain string) (*tls.Certificate, error) {
	if !ValidDomain(domain) {
		return nil, fmt.Errorf("preview certificate: invalid domain %q", domain)
	}
	c, err := ca.cached(ca.leaves, domain, []string{"*." + domain, domain})
	if err != nil {
		return nil, fmt.Errorf("preview certificate for %s: %w", domain, err)
	}
	return c, nil
}

// GetCertificate is for a TLS server's GetCertificate: Certificate(domain),
// except that when domain is a single label (localhost) a preview host's
// certificate names that host itself, since clients other than Go refuse
// "*.localhost". Those are made as clients ask, and kept (a bounded number).
func (ca *CA) GetCertificate(domain string) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	domain = normalizeDomain(domain)
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		host := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
		if _, _, ok := parseHost(host, domain); ok && !strings.Contains(domain, ".") {
			c, err := ca.cached(ca.hosts, host, []string{host, "*." + domain, domain})
			if err != nil {
				return nil, fmt.Errorf("preview certificate for %s: %w", host, err)
			}
			return c, nil
		}
		return ca.domainCertificate(domain)
	}
}

// maxHostCerts bounds the certificates kept for single hosts: a client can
// name any number of them, and one made again costs little.
const maxHostCerts = 1024

// cached returns cache[name], issuing it for names if it is missing or near
// its end.
func (ca *CA) cached(cache map[string]*tls.Certificate, name string, names []string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := cache[name]; c != nil && time.Until(c.Leaf.NotAfter) > leafRenew {
		return c, nil
	}
	c, err := ca.issue(names)
	if err != nil {
		return nil, err
	}
	if len(cache) >= maxHostCerts {
		clear(cache)
	}
	cache[name] = c
	return c, nil
}

// issue makes a server certificate for names, the first its subject. All
// of them share one key, which never leaves memory.
func (ca *CA) issue(names []string) (*tls.Certificate, error) {
	if ca.leafKey == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		ca.leafKey = key
	}
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: names[0], Organization: []string{"cove"}},
		DNSNames:    names,
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: ca.leafKey, Leaf: leaf}, nil
}

// ValidDomain reports whether d will do as a preview domain: a DNS name of
// lower-case letters, digits and hyphens, such as "localhost" or
// "preview.example.org".
func ValidDomain(d string) bool {
	if d == "" || len(d) > 253 {
		return false
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
