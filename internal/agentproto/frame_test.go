package agentproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestReadPayload reads payloads across readPayload's growth steps, and
// payloads cut short at the start, mid-step and past a step.
func TestReadPayload(t *testing.T) {
	big := bytes.Repeat([]byte("ab"), payloadStep+7) // over two steps
	tests := []struct {
		name    string
		n       int
		sent    []byte
		wantErr error
	}{
		{"empty", 0, nil, nil},
		{"small", 3, []byte("abc"), nil},
		{"over two steps", len(big), big, nil},
		{"nothing sent", 10, nil, io.EOF},
		{"cut mid-step", 10, []byte("abc"), io.ErrUnexpectedEOF},
		{"cut past a step", len(big), big[:payloadStep+1], io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readPayload(bytes.NewReader(tc.sent), uint32(tc.n))
			if !errors.Is(err, tc.wantErr) || (err == nil && tc.wantErr != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && !bytes.Equal(got, tc.sent[:tc.n]) {
				t.Fatalf("read %d bytes, not the %d sent", len(got), tc.n)
			}
		})
	}
}
