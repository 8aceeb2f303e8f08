package preview

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

// TestCurlTrustsCA checks that a client on OpenSSL (curl), trusting only
// the CA, accepts what GetCertificate serves for preview hosts under
// localhost, and for localhost itself.
func TestCurlTrustsCA(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok "+r.Host)
	}))
	srv.TLS = &tls.Config{GetCertificate: ca.GetCertificate("localhost")}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	port := portOf(srv.Listener.Addr())
	for _, host := range []string{"8000-sb-x.localhost", "3000-sb-0123456789ab.localhost", "localhost"} {
		hp := host + ":" + port
		out, err := exec.Command(curl, "-sS", "--noproxy", "*", "--cacert", ca.PEMPath(),
			"--resolve", hp+":127.0.0.1", "https://"+hp+"/").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok "+hp) {
			t.Errorf("curl https://%s: %v: %s", hp, err, out)
		}
	}
}
