package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/netpolicy"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/store"
)

// Template builds (internal/template) drive builder sandboxes through the
// calls of this file: a template is a snapshot, each of its cached steps
// a hidden one.

// Markers of the tags of a template build's own snapshots: a step's cache
// (NAME.step-KEY) and a build's result before it takes its name
// (NAME.build-RANDOM).
const (
	StepMarker  = ".step-"
	BuildMarker = ".build-"
)

// HiddenTag reports whether a snapshot is a template build's own: lists of
// snapshots leave it out, and it is removed with its template.
func HiddenTag(tag string) bool {
	return strings.Contains(tag, StepMarker) || strings.Contains(tag, BuildMarker)
}

// notHidden refuses a tag of a template build's own for a snapshot of
// another kind.
func notHidden(tag string) error {
	if HiddenTag(tag) {
		return invalidf("tag %q: %q and %q are kept for template builds", tag, StepMarker, BuildMarker)
	}
	return nil
}

// BuildStepBase is BuildSnapshot for a template build's first step, whose
// tag is hidden.
func (s *Service) BuildStepBase(ctx context.Context, o BuildOptions) (SnapshotInfo, error) {
	if !HiddenTag(o.Tag) {
		return SnapshotInfo{}, invalidf("tag %q is not a template step's", o.Tag)
	}
	return s.buildSnapshot(ctx, o)
}

// ImageID resolves an image name to the id of its current version.
func (s *Service) ImageID(name string) (string, error) {
	id, _, err := s.cfg.Images.Resolve(name)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", name, ErrNotFound)
	}
	return id, nil
}

// Spawnable reports whether a snapshot exists, is complete and was saved
// by this version of the runtime: a step cache that can be built on.
func (s *Service) Spawnable(ctx context.Context, tag string) bool {
	sn, err := s.snapshot(ctx, tag)
	return err == nil && !s.stale(sn) && sn.files.Disk+sn.files.Rootfs != ""
}

// StartBuilder starts a sandbox from a snapshot to run a build's steps in,
// under the build's egress policy (nil: the snapshot's).
func (s *Service) StartBuilder(ctx context.Context, tag string, network *netpolicy.Policy) (*Sandbox, error) {
	// As long as its tenant's quota lets a sandbox live.
	ttl := quotaTTL(ctx, s.cfg.Limits.MaxTTL)
	infos, err := s.Create(ctx, CreateOptions{SnapshotTag: tag, TTL: ttl, Network: network})
	if err != nil {
		return nil, err
	}
	sb, err := s.Open(ctx, infos[0].ID, infos[0].Token)
	if err != nil {
		s.Delete(context.WithoutCancel(ctx), infos[0].ID)
		return nil, err
	}
	return sb, nil
}

// Discard destroys a builder sandbox.
func (sb *Sandbox) Discard(ctx context.Context) {
	if err := sb.s.Delete(context.WithoutCancel(ctx), sb.b.rec.ID); err != nil {
		sb.s.log.Debug("discard a builder", "id", sb.b.rec.ID, "err", err)
	}
}

// StepRun is one RUN of a build: a shell script or an argv, with the
// environment, directory and user the Dockerfile gives it.
type StepRun struct {
	Shell string
	Args  []string
	Env   []string
	Cwd   string
	User  string
}

// stepTimeout bounds one RUN.
const stepTimeout = 30 * time.Minute

// RunStep runs a build's RUN, copying its output (stdout and stderr
// together) to out as it runs. It returns the command's exit code; err is
// for a command that could not run at all.
func (sb *Sandbox) RunStep(ctx context.Context, r StepRun, out io.Writer) (exit int, tail string, err error) {
	a, err := sb.agent(ctx)
	if err != nil {
		return 0, "", err
	}
	log := "/tmp/.cove-step-" + randhex.New(4) + ".log"
	// The shell sends all output to the log, which the daemon reads as it
	// grows (as a snapshot's warm command does), then runs the step.
	args := []string{"/bin/sh", "-c", "exec >" + log + " 2>&1\n" + r.Shell}
	if r.Shell == "" {
		args = append([]string{"/bin/sh", "-c", "exec >" + log + " 2>&1; exec \"$@\"", "sh"}, r.Args...)
	}
	req := agentproto.ExecRequest{Args: args, Env: r.Env, Cwd: r.Cwd, User: r.User, TimeoutMs: stepTimeout.Milliseconds()}
	if err := req.Validate(); err != nil {
		return 0, "", mapErr(err)
	}
	res, tail, err := runLogged(ctx, a, req, log, out)
	switch {
	case err != nil:
		return 0, "", err
	case res.TimedOut:
		return -1, tail, invalidf("the command did not finish within %s", stepTimeout)
	case res.ExitCode != 0 && res.Stderr != "" && tail == "":
		// It failed before the shell sent its output to the log.
		return res.ExitCode, res.Stderr, nil
	}
	return res.ExitCode, tail, nil
}

// StepSave describes a snapshot a build saves of its builder. A step
// (Final false) is saved with the builder left running for the next step;
// the final one stops it. Env, Cwd and User are the final snapshot's
// defaults for its sandboxes.
type StepSave struct {
	Tag   string
	Final bool
	Env   map[string]string
	Cwd   string
	User  string
}

// SaveStep saves the builder as a snapshot. It has no token: it holds
// only what the Dockerfile put there, and anyone may spawn from it.
func (sb *Sandbox) SaveStep(ctx context.Context, o StepSave) (SnapshotInfo, error) {
	s, b := sb.s, sb.b
	if err := validTag(o.Tag); err != nil {
		return SnapshotInfo{}, err
	}
	if err := b.usable(); err != nil {
		return SnapshotInfo{}, err
	}
	var meta store.Meta
	if o.Final {
		if err := setRunEnv(&meta, o.Env, o.Cwd); err != nil {
			return SnapshotInfo{}, err
		}
		if o.User != "" {
			if err := agentproto.CheckUser(o.User); err != nil {
				return SnapshotInfo{}, mapErr(err)
			}
			meta.User = o.User
		}
		a, err := sb.agent(ctx)
		if err != nil {
			return SnapshotInfo{}, err
		}
		if err := checkMeta(ctx, a, meta); err != nil {
			return SnapshotInfo{}, err
		}
	}
	owner := snapshotOwner(ctx) // as the build's first step's
	if err := s.checkDiskQuota(ctx, owner, fmt.Sprintf("template step %q", o.Tag)); err != nil {
		return SnapshotInfo{}, err
	}
	release, err := s.claimTag(o.Tag)
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer release()
	_, files, err := s.imageOf(b)
	if err != nil {
		return SnapshotInfo{}, err
	}
	depth := 1
	if p, err := s.snapshot(context.Background(), b.rec.SnapshotTag); err == nil { // its own parent
		depth = p.rec.Depth + 1
	}
	b.mu.Lock()
	network := b.net
	b.mu.Unlock()
	rec := store.Snapshot{Tag: o.Tag, Parent: b.rec.SnapshotTag, Depth: depth, Backend: s.cfg.Runtime.Name(),
		Image: b.rec.Image, CPUs: b.rec.CPUs, MemoryMiB: b.rec.MemoryMiB, Limits: b.rec.Limits,
		NetworkJSON: encodePolicy(network), Meta: meta, Tenant: owner}
	if o.Final {
		// The final save stops the builder for good (as a snapshot
		// build's does): its runtime process ending then is no death.
		// The caller discards it after.
		b.mu.Lock()
		b.rec.Status = StatusBuilding
		b.mu.Unlock()
	}
	sn, _, _, err := s.checkpoint(ctx, b, rec, files, !o.Final)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return s.snapInfo(sn), nil
}

// PublishSnapshot gives a build's result (from) its name (to), with a
// warm pool of pool sandboxes (-1: the default), replacing the previous snapshot of that name. A
// previous one that sandboxes still run from is kept, and the call
// refused with ErrConflict.
func (s *Service) PublishSnapshot(ctx context.Context, from, to string, pool int) (SnapshotInfo, error) {
	if err := validTag(to); err != nil {
		return SnapshotInfo{}, err
	}
	if pool < 0 {
		pool = s.cfg.DefaultPoolSize
	}
	if pool > 64 {
		return SnapshotInfo{}, invalidf("pool_size must be at most 64")
	}
	if old, err := s.Snapshot(ctx, to); err == nil {
		if old.Children > 0 {
			return SnapshotInfo{}, fmt.Errorf("%w: %d live sandboxes were spawned from %q: kill them first", ErrConflict, old.Children, to)
		}
		if err := s.DeleteSnapshot(ctx, to); err != nil {
			return SnapshotInfo{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.snapshots[from]
	if sn == nil || !sn.ready {
		return SnapshotInfo{}, fmt.Errorf("snapshot %q: %w", from, ErrNotFound)
	}
	if _, taken := s.snapshots[to]; taken {
		return SnapshotInfo{}, fmt.Errorf("%w: snapshot %q was made meanwhile", ErrConflict, to)
	}
	// Its children are the builder, gone by now; its pool is empty (a
	// build saves with none).
	if err := os.Rename(s.snapshotDir(from), s.snapshotDir(to)); err != nil {
		return SnapshotInfo{}, fmt.Errorf("rename snapshot %s: %w", from, err)
	}
	if err := s.cfg.Store.RenameSnapshot(ctx, from, to, pool); err != nil {
		os.Rename(s.snapshotDir(to), s.snapshotDir(from))
		return SnapshotInfo{}, err
	}
	delete(s.snapshots, from)
	sn.rec.Tag, sn.rec.PoolSize = to, pool
	s.snapshots[to] = sn
	go s.kickPool()
	return s.snapInfoLocked(sn), nil
}

// HiddenSnapshots lists the tags of a template's step caches and
// unfinished results.
func (s *Service) HiddenSnapshots(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for tag, sn := range s.snapshots {
		if sn.ready && (strings.HasPrefix(tag, name+StepMarker) || strings.HasPrefix(tag, name+BuildMarker)) {
			out = append(out, tag)
		}
	}
	return out
}

// AllHiddenSnapshots lists every template build's own snapshot.
func (s *Service) AllHiddenSnapshots() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for tag, sn := range s.snapshots {
		if sn.ready && HiddenTag(tag) {
			out = append(out, tag)
		}
	}
	return out
}

// SnapshotSize is a snapshot's size on disk; 0 for none.
func (s *Service) SnapshotSize(tag string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn := s.snapshots[tag]; sn != nil && sn.ready {
		return sn.rec.SizeBytes
	}
	return 0
}
