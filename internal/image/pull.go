package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
)

// Puller imports registry images on demand, under a name derived from the
// reference, so that a Dockerfile's FROM can name one.
type Puller struct {
	Dir      string
	Agent    func() (string, error) // the cove-agent binary to add
	VM       bool
	MaxBytes int64
	Progress io.Writer // may be nil
	Logger   *slog.Logger
}

// RefName is the image name a pulled reference is stored under: the
// reference with every character a name cannot hold replaced by '_'.
func RefName(ref string) string {
	b := []byte(ref)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok || i == 0 && (c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), "_")
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

// Pull returns the name of ref's image, importing it first unless an
// image of that name is already in the store: like a Dockerfile build's
// FROM, a tag is not looked up again once it is local.
func (p Puller) Pull(ctx context.Context, ref string) (string, error) {
	name := RefName(ref)
	if name == "" {
		return "", ErrInvalidName
	}
	if _, err := Resolve(p.Dir, name); err == nil {
		return name, nil
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	agent, err := p.Agent()
	if err != nil {
		return "", err
	}
	_, err = Import(ctx, p.Dir, ImportOptions{Name: name, Ref: ref, Agent: agent, VM: p.VM,
		MaxBytes: p.MaxBytes, Progress: p.Progress, Logger: p.Logger})
	return name, err
}

// DefaultAgent is the cove-agent binary of dir's default image: the one
// the daemon's sandboxes run, and so the one an import adds.
func DefaultAgent(dir string) (string, error) {
	def, err := Resolve(dir, DefaultName)
	if err != nil {
		return "", fmt.Errorf("no cove-agent to add to the image: build the default image first (cove image build): %w", err)
	}
	return filepath.Join(def.Rootfs, AgentPath), nil
}
