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
// *.<preview domain>. It issues certificates only in memory; only its own
// certificate and key are kept on disk.
//
// Clients trust it by its certificate, ca.pem in the CA's directory
// (PEMPath), never by its key:
//
//   - the host's store (Debian; curl, wget, Python's ssl and most tools read
//     it): cp ca.pem /usr/local/share/ca-certificates/cove-preview.crt &&
//     update-ca-certificates
//   - one program or SDK: NODE_EXTRA_CA_CERTS=ca.pem (Node, so the E2B JS
//     SDK), REQUESTS_CA_BUNDLE=ca.pem (Python requests), SSL_CERT_FILE=ca.pem
//     (Go, OpenSSL, Python's ssl; it replaces the system's roots), or
//     curl --cacert ca.pem
//   - a browser: import ca.pem as an authority in its certificate settings
//     (Chromium and Firefox on Linux keep their own store, not the host's).
//
// Trusting it lets whoever holds ca-key.pem (root on the daemon's host)
// vouch for any name to that client.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	pemPath string

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by domain
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
		ca, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("preview CA in %s: %w", dir, err)
		}
		ca.pemPath = certPath
		return ca, nil
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
	return &CA{cert: cert, key: key, pemPath: certPath, leaves: map[string]*tls.Certificate{}}, nil
}

// parseCA checks that the files hold a CA certificate and its own key.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New(caCertFile + ": no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	if !cert.IsCA {
		return nil, errors.New(caCertFile + ": not a CA certificate")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, errors.New(caKeyFile + ": no PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New(caKeyFile + " is not the key of " + caCertFile)
	}
	return &CA{cert: cert, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// PEMPath is the CA's certificate, which clients are to trust.
func (ca *CA) PEMPath() string { return ca.pemPath }

// Certificate returns a certificate for "*.<domain>" and "<domain>" issued
// by the CA, with its chain, for a TLS server's Certificates. It is made
// once per domain and kept in memory, and made again as it nears its end.
//
// Go and curl accept "*.localhost" for 8000-ID.localhost when the CA is
// trusted (the preview package's tests check Go's side).
func (ca *CA) Certificate(domain string) (tls.Certificate, error) {
	domain = normalizeDomain(domain)
	if !validDomain(domain) {
		return tls.Certificate{}, fmt.Errorf("preview certificate: invalid domain %q", domain)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[domain]; c != nil && time.Until(c.Leaf.NotAfter) > leafRenew {
		return *c, nil
	}
	c, err := ca.issue(domain)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("preview certificate for %s: %w", domain, err)
	}
	ca.leaves[domain] = c
	return *c, nil
}

func (ca *CA) issue(domain string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "*." + domain, Organization: []string{"cove"}},
		DNSNames:    []string{"*." + domain, domain},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// validDomain accepts a DNS name of letters, digits and hyphens.
func validDomain(d string) bool {
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
