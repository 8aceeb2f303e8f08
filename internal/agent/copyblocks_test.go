package agent

import (
	"bytes"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// sizeWriter records the size of each write.
type sizeWriter struct{ sizes []int }

func (w *sizeWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

// TestCopyBlocks: an upload reaches the disk in putBlock writes however
// small the reads it arrives in, and content cut short is an error, not
// a shorter file.
func TestCopyBlocks(t *testing.T) {
	content := bytes.Repeat([]byte("q"), 2*putBlock+5)
	tests := []struct {
		name      string
		r         io.Reader
		wantErr   bool
		wantSizes []int
	}{
		{"whole", iotest.HalfReader(bytes.NewReader(content)), false, []int{putBlock, putBlock, 5}},
		{"cut short", io.MultiReader(bytes.NewReader(content[:putBlock+1]), iotest.ErrReader(io.ErrUnexpectedEOF)), true, []int{putBlock, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w sizeWriter
			err := copyBlocks(&w, tc.r)
			if (err != nil) != tc.wantErr {
				t.Fatalf("copyBlocks: %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(w.sizes, tc.wantSizes) {
				t.Fatalf("writes %v, want %v", w.sizes, tc.wantSizes)
			}
		})
	}
}
