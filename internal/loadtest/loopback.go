package loadtest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// CheckLoopback refuses a daemon URL whose host is not a loopback
// address: a load test is a flood of calls, and it must never be aimed at
// somebody else's daemon by a stray COVE_URL. ("localhost" counts; other
// names are refused rather than resolved, since what they resolve to can
// change.) Go's proxy-from-environment never proxies loopback hosts, so
// the calls stay on this host.
func CheckLoopback(daemonURL string) error {
	u, err := url.Parse(daemonURL)
	if err != nil {
		return fmt.Errorf("daemon URL %q: %w", daemonURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("daemon URL %q: want http or https", daemonURL)
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("daemon URL %q: the load test talks only to a daemon on a loopback address (127.0.0.1, ::1, localhost)", daemonURL)
}

// port returns the URL's port, its scheme's default if it names none.
func port(daemonURL string) (int, error) {
	u, err := url.Parse(daemonURL)
	if err != nil {
		return 0, err
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := net.LookupPort("tcp", p)
	if err != nil {
		return 0, err
	}
	return n, nil
}
