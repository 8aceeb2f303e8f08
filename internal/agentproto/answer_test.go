package agentproto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestAnswerFrame: answers wrapped by hand decode as a Response, or with
// an id as a lane's answer; one over the frame limit becomes an error.
func TestAnswerFrame(t *testing.T) {
	id := uint64(42)
	big := strings.Repeat("x", maxJSONFrame)
	tests := []struct {
		name     string
		id       *uint64
		out      any
		err      error
		wantBody string
		wantCode string
	}{
		{"body", nil, PingResult{Version: 1}, nil, `{"version":1}`, ""},
		{"lane body", &id, PingResult{Version: 1}, nil, `{"version":1}`, ""},
		{"agent error", &id, nil, Errorf(CodeNotFound, "gone"), "", CodeNotFound},
		{"other error", nil, nil, errors.New("boom"), "", CodeInternal},
		{"too large", &id, big, nil, "", CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a laneAnswer
			if err := json.Unmarshal(answerFrame(tc.id, tc.out, tc.err), &a); err != nil {
				t.Fatal(err)
			}
			if tc.id != nil && a.ID != *tc.id {
				t.Errorf("id %d, want %d", a.ID, *tc.id)
			}
			if tc.wantCode != "" {
				if a.Error == nil || a.Error.Code != tc.wantCode {
					t.Fatalf("error %v, want code %s", a.Error, tc.wantCode)
				}
				return
			}
			var m map[string]any
			json.Unmarshal(a.Body, &m)
			if a.Error != nil || m["version"] != 1.0 {
				t.Fatalf("answer %+v, want body %s", a, tc.wantBody)
			}
		})
	}
}
