package image

import "testing"

func TestMirrorFromDeb822(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"debian default with snapshot comment", `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`, "http://deb.debian.org/debian"},
		{"security first, suite match wins", `Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security

Types: deb deb-src
URIs: http://mirror.example/debian/ http://other.example/debian
Suites: bookworm
`, "http://mirror.example/debian"},
		{"no suite match takes first deb", `Types: deb
URIs: http://a.example/debian
Suites: trixie
`, "http://a.example/debian"},
		{"disabled and deb-src skipped", `Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

types: deb
uris: http://on.example/debian
suites: bookworm
`, "http://on.example/debian"},
		{"continuation line", "Types: deb\nURIs:\n http://cont.example/debian\nSuites: bookworm\n", "http://cont.example/debian"},
		{"empty", "", ""},
		{"only comments", "# URIs: http://x\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirrorFromDeb822([]byte(tt.in), "bookworm"); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMirrorFromSourcesList(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "deb http://deb.debian.org/debian bookworm main\n", "http://deb.debian.org/debian"},
		{"security first", "deb http://security.debian.org/debian-security bookworm-security main\ndeb http://ftp.de.debian.org/debian/ bookworm main contrib\n", "http://ftp.de.debian.org/debian"},
		{"options", "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://m.example/debian bookworm main\n", "http://m.example/debian"},
		{"comments and deb-src", "# deb http://commented/debian bookworm main\ndeb-src http://src/debian bookworm main\ndeb http://real/debian bookworm main # trailing\n", "http://real/debian"},
		{"no suite match", "deb http://old/debian bullseye main\n", "http://old/debian"},
		{"unterminated options", "deb [arch=amd64 http://x/debian bookworm main\n", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mirrorFromSourcesList([]byte(tt.in), "bookworm"); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
