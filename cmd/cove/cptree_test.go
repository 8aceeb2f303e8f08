package main

import (
	"strings"
	"testing"
)

func TestParseCpDir(t *testing.T) {
	for _, tc := range []struct {
		name, src, dst string
		want           cpArgs
		err            string
	}{
		{"upload", "./repo", "sb1:repo", cpArgs{upload: true, id: "sb1", remote: "repo", local: "./repo"}, ""},
		{"download", "sb1:/work/repo", "back", cpArgs{id: "sb1", remote: "/work/repo", local: "back"}, ""},
		{"no remote dir", "./repo", "sb1:", cpArgs{}, "name the directory"},
		{"no remote dir down", "sb1:", "x", cpArgs{}, "name the directory"},
		{"stdin", "-", "sb1:d", cpArgs{}, "not standard input"},
		{"both remote", "sb1:a", "sb2:b", cpArgs{}, "between sandboxes"},
		{"both local", "./a", "./b", cpArgs{}, "must be ID:DIR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCpDir(tc.src, tc.dst)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseCpDir = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
