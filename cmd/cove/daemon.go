package main

// Finding the daemon and its API key, and hints for the errors it answers
// with.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/pkg/client"
)

const (
	defaultURL        = "http://127.0.0.1:8080"
	defaultAPIKeyFile = "/etc/cove/token"
)

// The client flags' help. Their defaults are not taken from the
// environment at definition time, so that --help never prints a secret.
const (
	urlUsage        = "daemon URL (default $COVE_URL, else " + defaultURL + ")"
	apiKeyUsage     = "the daemon's API key (default $COVE_API_KEY, else $COVE_TOKEN, else the contents of --api-key-file)"
	apiKeyFileUsage = "the daemon's API key file, read when no key is given"
)

// clientConfig is how a client verb reaches the daemon: its URL and its
// API key.
type clientConfig struct {
	url        string
	apiKey     string
	apiKeyFile string
}

// addFlags registers --url, --api-key and --api-key-file (--token-file
// before) on fs.
func (c *clientConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.url, "url", "", urlUsage)
	fs.StringVar(&c.apiKey, "api-key", "", apiKeyUsage)
	fs.StringVar(&c.apiKeyFile, "api-key-file", defaultAPIKeyFile, apiKeyFileUsage)
	deprecatedAlias(fs, "api-key-file", "token-file")
}

// baseURL returns the daemon's URL from --url, $COVE_URL or the default.
func (c *clientConfig) baseURL() string {
	u := c.url
	if u == "" {
		u = os.Getenv("COVE_URL")
	}
	if u == "" {
		u = defaultURL
	}
	if !strings.Contains(u, "://") {
		u = "http://" + u // "127.0.0.1:8080" is what people type
	}
	return strings.TrimRight(u, "/")
}

// key returns the API key from --api-key, $COVE_API_KEY, $COVE_TOKEN (its
// name before) or --api-key-file.
func (c *clientConfig) key() (string, error) {
	if c.apiKey != "" {
		return c.apiKey, nil
	}
	for _, env := range []string{"COVE_API_KEY", "COVE_TOKEN"} {
		if k := strings.TrimSpace(os.Getenv(env)); k != "" {
			return k, nil
		}
	}
	const how = "set COVE_API_KEY or pass --api-key"
	if c.apiKeyFile == "" {
		return "", fmt.Errorf("no API key: %s", how)
	}
	b, err := os.ReadFile(c.apiKeyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no API key: %s does not exist; start the daemon with `make up` (it writes the key there), or %s", c.apiKeyFile, how)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("no API key: %s is not readable by you; run `export COVE_API_KEY=$(sudo cat %s)`, or pass --api-key", c.apiKeyFile, c.apiKeyFile)
	case err != nil:
		return "", fmt.Errorf("no API key: %w; %s", err, how)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("no API key: %s is empty; %s", c.apiKeyFile, how)
	}
	return k, nil
}

// client returns a client for the daemon and its URL, which keys the
// sandbox token store.
func (c *clientConfig) client(opts ...client.Option) (*client.Client, string, error) {
	key, err := c.key()
	if err != nil {
		return nil, "", err
	}
	u := c.baseURL()
	opts = append([]client.Option{client.WithUserAgent("cove-cli/" + version)}, opts...)
	return client.New(u, key, opts...), u, nil
}

// hintSep starts the hint an error carries.
const hintSep = "\n  hint: "

// sandboxClient is client for a call to sandbox id, with the sandbox
// token it presents (see sandboxTokenFor).
func (c *clientConfig) sandboxClient(flagToken, id string) (cl *client.Client, daemon, token string, err error) {
	if cl, daemon, err = c.client(); err != nil {
		return nil, "", "", err
	}
	if token, err = sandboxTokenFor(flagToken, daemon, id); err != nil {
		return nil, "", "", err
	}
	return cl, daemon, token, nil
}

// explain adds what to do next to errors that have a usual cause, unless
// a verb's own hint came first.
func explain(err error, daemonURL string) error {
	if err == nil || strings.Contains(err.Error(), hintSep) {
		return err
	}
	var dnsErr *net.DNSError
	var hint string
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		hint = fmt.Sprintf("is the daemon running at %s? start it with `make up` or `cove serve`, or point --url / COVE_URL at it", daemonURL)
	case errors.As(err, &dnsErr):
		hint = fmt.Sprintf("check the daemon URL %s (--url or COVE_URL)", daemonURL)
	case errors.Is(err, client.ErrUnauthorized):
		hint = "the daemon refused the API key: check COVE_API_KEY or --api-key (the daemon's key is in " + defaultAPIKeyFile + ")"
	case errors.Is(err, client.ErrForbidden):
		hint = "the daemon refused the sandbox token: the right one is in `cove create --json`'s output; pass it with --sandbox-token or COVE_SANDBOX_TOKEN"
	case errors.Is(err, client.ErrLimit):
		hint = "the daemon is at a limit (see `cove info`); kill sandboxes you no longer need (`cove ls`, `cove kill`)"
	case errors.Is(err, client.ErrGone):
		hint = "the sandbox died (`cove ls` shows why); what ran in it is gone: `cove create` a new one"
	case errors.Is(err, client.ErrUnavailable):
		// The daemon's message says which: a memory budget or host floor
		// reached, an agent it could not reach, or a start still under way.
		hint = "the daemon cannot do it now, for the reason above; free what it names (`cove ls`, `cove kill`) or try again shortly, and see `cove info`"
	case errors.Is(err, context.DeadlineExceeded):
		hint = "the daemon did not answer in time; is it overloaded? see `cove info`"
	default:
		return err
	}
	return fmt.Errorf("%w"+hintSep+"%s", err, hint)
}

// noSuchSandbox adds a hint to a not-found error about a sandbox.
func noSuchSandbox(err error, id string) error {
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("%w\n  hint: sandbox %s may have expired or been killed; `cove ls` lists those alive", err, id)
	}
	return err
}

// notFoundIn is noSuchSandbox for calls where not found may mean a file
// in the sandbox instead: it asks the daemon which.
func notFoundIn(ctx context.Context, cl *client.Client, err error, id string) error {
	if !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if _, gerr := cl.GetSandbox(ctx, id); errors.Is(gerr, client.ErrNotFound) {
		return noSuchSandbox(err, id)
	}
	return err
}
