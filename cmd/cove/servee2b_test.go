package main

import "testing"

func TestLoopbackDefault(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{":3000", "127.0.0.1:3000"},
		{"0.0.0.0:3000", "0.0.0.0:3000"},
		{"127.0.0.1:49983", "127.0.0.1:49983"},
		{"[::1]:3000", "[::1]:3000"},
	} {
		if got := loopbackDefault(tt.in); got != tt.want {
			t.Errorf("loopbackDefault(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestE2BDomainFor(t *testing.T) {
	for _, tt := range []struct {
		name, flag, preview string
		http, https         int
		want                string
	}{
		{"HTTPS preview port", "", "localhost", 8080, 8443, "localhost:8443"},
		{"no HTTPS: the API's port", "", "localhost", 8080, 0, "localhost:8080"},
		{"443 needs no port", "", "cove.example", 8080, 443, "cove.example"},
		{"the flag wins", "sb.example", "localhost", 8080, 8443, "sb.example"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := serveFlags{netFlags: netFlags{previewDomain: tt.preview}, e2bFlags: e2bFlags{e2bDomain: tt.flag}}
			if got := f.e2bDomainFor(tt.http, tt.https); got != tt.want {
				t.Fatalf("e2bDomainFor = %q, want %q", got, tt.want)
			}
		})
	}
}
