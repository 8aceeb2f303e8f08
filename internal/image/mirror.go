package image

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// FallbackMirror is used when the host's apt sources name no Debian mirror.
const FallbackMirror = "http://deb.debian.org/debian"

// Host apt sources, in the order DetectMirror consults them.
const (
	deb822Sources = "/etc/apt/sources.list.d/debian.sources"
	legacySources = "/etc/apt/sources.list"
)

// DetectMirror returns the Debian mirror the host's apt uses for suite, so
// that image builds work where only that mirror is reachable. It prefers an
// entry for suite itself (not bookworm-security etc.), else the first
// entry, and falls back to FallbackMirror when the host has none.
func DetectMirror(suite string) (string, error) {
	for _, src := range []struct {
		path  string
		parse func([]byte, string) string
	}{
		{deb822Sources, mirrorFromDeb822},
		{legacySources, mirrorFromSourcesList},
	} {
		data, err := os.ReadFile(src.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("detect mirror: %w", err)
		}
		if m := src.parse(data, suite); m != "" {
			return m, nil
		}
	}
	return FallbackMirror, nil
}

// mirrorFromDeb822 returns the mirror of a deb822 sources file (the
// "URIs:" field): of the first enabled "deb" stanza listing suite, else of
// the first enabled "deb" stanza; "" if there is none.
func mirrorFromDeb822(data []byte, suite string) string {
	var first string
	for _, st := range deb822Stanzas(data) {
		if strings.EqualFold(st["enabled"], "no") || !slices.Contains(strings.Fields(st["types"]), "deb") {
			continue
		}
		uris := strings.Fields(st["uris"])
		if len(uris) == 0 {
			continue
		}
		if slices.Contains(strings.Fields(st["suites"]), suite) {
			return strings.TrimRight(uris[0], "/")
		}
		if first == "" {
			first = strings.TrimRight(uris[0], "/")
		}
	}
	return first
}

// deb822Stanzas splits a deb822 file into stanzas of lower-cased field
// names to values. Comment lines are dropped; continuation lines are
// appended to the previous field.
func deb822Stanzas(data []byte) []map[string]string {
	var (
		stanzas []map[string]string
		cur     map[string]string
		last    string
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.TrimSpace(line) == "":
			cur, last = nil, ""
			continue
		case line[0] == ' ' || line[0] == '\t':
			if cur != nil && last != "" {
				cur[last] += " " + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if cur == nil {
			cur = map[string]string{}
			stanzas = append(stanzas, cur)
		}
		last = strings.ToLower(strings.TrimSpace(k))
		cur[last] = strings.TrimSpace(v)
	}
	return stanzas
}

// mirrorFromSourcesList returns the URI of the first "deb" line of a
// one-line-style sources.list for suite, else of the first "deb" line.
func mirrorFromSourcesList(data []byte, suite string) string {
	var first string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options: [arch=amd64 signed-by=...]
			i := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, "]") })
			if i < 0 {
				continue
			}
			f = f[i+1:]
		}
		if len(f) < 2 {
			continue
		}
		uri := strings.TrimRight(f[0], "/")
		if f[1] == suite {
			return uri
		}
		if first == "" {
			first = uri
		}
	}
	return first
}
