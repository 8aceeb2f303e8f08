package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"

	"github.com/spf13/pflag"
)

// defaultPresetsFile holds the named network policies (pypi, npm, ...)
// that `make up` installs from deploy/network-presets.json.
const defaultPresetsFile = "/etc/cove/network-presets.json"

// netFlags are serve's flags for the sandboxes' network and the preview
// proxy.
type netFlags struct {
	presets                 string
	presetsGiven            bool // --network-presets was given: the file must exist
	dnsUpstream, resolvPriv []string
	previewDomain           string
	previewHTTPSAddr        string
	previewCert, previewKey string
}

func (f *netFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.presets, "network-presets", defaultPresetsFile, "JSON file of named network policies (presets) that policies may name; the default is read if it exists")
	fs.StringArrayVar(&f.dnsUpstream, "dns-upstream", nil, "DNS server ip:port the sandboxes' resolver forwards allowed names to, repeatable (default: the nameservers of /etc/resolv.conf)")
	fs.StringArrayVar(&f.resolvPriv, "resolvable-private", nil, "private CIDR that allowed names may resolve into and be reached at, repeatable (default: none)")
	fs.StringVar(&f.previewDomain, "preview-domain", "localhost", "domain of preview URLs (PORT-ID.DOMAIN); browsers resolve *.localhost to loopback without any DNS set-up")
	fs.StringVar(&f.previewHTTPSAddr, "preview-https-addr", "", "address to serve HTTPS preview URLs on (default: off)")
	fs.StringVar(&f.previewCert, "preview-cert", "", "certificate (PEM) for *.DOMAIN on --preview-https-addr (default: one issued by a local CA under --state-dir)")
	fs.StringVar(&f.previewKey, "preview-key", "", "private key (PEM) of --preview-cert")
}

// presetsFile is the presets file to load, "" for none: the default one
// is optional, a file given must exist.
func (f netFlags) presetsFile() (string, error) {
	if f.presets == "" {
		return "", nil
	}
	if _, err := os.Stat(f.presets); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !f.presetsGiven {
			return "", nil
		}
		return "", fmt.Errorf("--network-presets: %w", err)
	}
	return f.presets, nil
}

// check validates the flags that need no file.
func (f netFlags) check() error {
	for _, a := range f.dnsUpstream {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return fmt.Errorf("--dns-upstream %q: want ip:port", a)
		}
	}
	if _, err := f.resolvablePrivate(); err != nil {
		return err
	}
	if (f.previewCert == "") != (f.previewKey == "") {
		return errors.New("--preview-cert and --preview-key go together")
	}
	if f.previewCert != "" && f.previewHTTPSAddr == "" {
		return errors.New("--preview-cert needs --preview-https-addr")
	}
	if f.previewDomain == "" {
		return errors.New("--preview-domain must not be empty")
	}
	return nil
}

// resolvablePrivate parses --resolvable-private.
func (f netFlags) resolvablePrivate() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range f.resolvPriv {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("--resolvable-private %q: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// listenPrefixes are the addresses the daemon listens on, which no
// sandbox may reach whatever its policy allows: each listen address's IP
// when it names one (a wildcard's are the host's, which are denied anyway).
func listenPrefixes(addrs ...string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", a, err)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.IsUnspecified() {
			continue // a name, or every address: the host's own
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}
