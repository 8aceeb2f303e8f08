package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/outtext"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
)

// build is one Build in progress.
type build struct {
	m         *Manager
	o         BuildOptions
	plan      *Plan
	ctx       *Context
	imageName string
	prev      store.Template // the template's current version, if any

	base     planned // the FROM step
	steps    []planned
	finalKey string
	total    int

	builder *sandbox.Sandbox
	made    []string // snapshots this build saved: removed if it fails
}

// prepare works out every step's cache key before anything runs, so that
// a COPY of a missing file fails before a sandbox starts. A step's key is
// the hash of its parent's, its instruction as expanded and, for a COPY,
// the files it copies.
func (b *build) prepare(imageID string) error {
	o := b.o
	key := hashOf("FROM", imageID, o.CPUs, o.MemoryMiB, o.DiskMiB)
	b.base = planned{Step: Step{Line: b.plan.FromLine, Text: "FROM " + b.plan.From}, key: key, tag: b.m.stepTag(o.Name, key)}
	for _, s := range b.plan.Steps {
		p := planned{Step: s}
		var files string
		if s.Op == OpCopy {
			cs, err := b.ctx.resolveCopy(s)
			if err != nil {
				return err
			}
			p.copy, files = cs, cs.digest()
		}
		// The text is left out (a comment's change is no change); the
		// expanded step says what it does.
		st := s
		st.Text, st.Line = "", 0
		key = hashOf(key, st, files)
		p.key = key
		if s.Op == OpRun || s.Op == OpCopy || s.Op == OpWorkdir {
			p.tag = b.m.stepTag(o.Name, key)
		}
		b.steps = append(b.steps, p)
	}
	b.finalKey = hashOf(key, o.Start, o.Ready, b.plan.Env, b.plan.Cwd, b.plan.User)
	b.total = 1 + len(b.steps)
	if o.Start != "" || o.Ready != "" {
		b.total++
	}
	return nil
}

func (b *build) emit(ev Event) {
	if b.o.Progress != nil {
		b.o.Progress(ev)
	}
}

func (b *build) announce(n int, p planned, cached bool) {
	b.emit(Event{Step: &StepEvent{N: n, Total: b.total, Line: p.Line, Text: p.Text, Cached: cached}})
}

func (b *build) reportAllCached() {
	b.announce(1, b.base, true)
	for i, p := range b.steps {
		b.announce(i+2, p, true)
	}
	if b.total > len(b.steps)+1 {
		b.announce(b.total, planned{Step: Step{Text: b.startText()}}, true)
	}
}

func (b *build) startText() string {
	return fmt.Sprintf("start %q, ready %q", b.o.Start, b.o.Ready)
}

// run builds what is not cached: the base, each step after the last
// cached one, then the template's own snapshot.
func (b *build) run(ctx context.Context) error {
	defer func() {
		if b.builder != nil {
			b.builder.Discard(ctx)
		}
	}()
	svc := b.m.svc
	last := b.base.tag
	cached := svc.Spawnable(ctx, last)
	b.announce(1, b.base, cached)
	if !cached {
		if err := b.buildBase(ctx); err != nil {
			return err
		}
	}
	for i, p := range b.steps {
		if cached && (p.tag == "" || svc.Spawnable(ctx, p.tag)) {
			b.announce(i+2, p, true)
			if p.tag != "" {
				last = p.tag
			}
			continue
		}
		cached = false
		b.announce(i+2, p, false)
		if err := b.ensureBuilder(ctx, last); err != nil {
			return err
		}
		if err := b.runStep(ctx, p); err != nil {
			return err
		}
		if p.tag == "" {
			continue
		}
		if err := b.save(ctx, p.tag); err != nil {
			return lineErr(p.Line, "save the step: %v", err)
		}
		last = p.tag
	}
	if b.total > len(b.steps)+1 {
		b.announce(b.total, planned{Step: Step{Text: b.startText()}}, false)
	}
	return b.finish(ctx, last)
}

// buildBase saves the image FROM names, booted and warmed, as the first
// step's cache.
func (b *build) buildBase(ctx context.Context) error {
	svc := b.m.svc
	if _, err := svc.Snapshot(ctx, b.base.tag); err == nil {
		svc.DeleteSnapshot(ctx, b.base.tag) // stale: saved by another runtime version
	}
	_, err := svc.BuildStepBase(ctx, sandbox.BuildOptions{Tag: b.base.tag, Image: b.imageName, Warm: "true",
		CPUs: b.o.CPUs, MemoryMiB: b.o.MemoryMiB, DiskMiB: b.o.DiskMiB, Network: b.o.Network})
	if err != nil {
		return fmt.Errorf("Dockerfile line %d: FROM %s: %w", b.base.Line, b.plan.From, err)
	}
	b.made = append(b.made, b.base.tag)
	return nil
}

func (b *build) ensureBuilder(ctx context.Context, from string) error {
	if b.builder != nil {
		return nil
	}
	sb, err := b.m.svc.StartBuilder(ctx, from, b.o.Network)
	if err != nil {
		return fmt.Errorf("start the builder sandbox: %w", err)
	}
	b.builder = sb
	return nil
}

// save keeps the builder's state as a step's cache; it keeps running.
func (b *build) save(ctx context.Context, tag string) error {
	svc := b.m.svc
	if _, err := svc.Snapshot(ctx, tag); err == nil {
		svc.DeleteSnapshot(ctx, tag) // there, but not spawnable: stale
	}
	if _, err := b.builder.SaveStep(ctx, sandbox.StepSave{Tag: tag}); err != nil {
		return err
	}
	b.made = append(b.made, tag)
	return nil
}

// runStep runs one step in the builder.
func (b *build) runStep(ctx context.Context, p planned) error {
	switch p.Op {
	case OpRun:
		cwd := p.Cwd
		if cwd == "" {
			cwd = "/"
		}
		w := &outputWriter{emit: b.emit}
		code, tail, err := b.builder.RunStep(ctx, sandbox.StepRun{Shell: p.Shell, Args: p.Args, Env: p.Env, Cwd: cwd, User: p.User}, w)
		w.flush()
		if err != nil {
			return lineErr(p.Line, "%s: %v", p.Text, err)
		}
		if code != 0 {
			return lineErr(p.Line, "%s: exited %d: %s", p.Text, code, outtext.LastLine(tail))
		}
	case OpWorkdir:
		code, tail, err := b.builder.RunStep(ctx, sandbox.StepRun{Args: []string{"mkdir", "-p", p.Cwd}, Cwd: "/"}, nil)
		if err == nil && code != 0 {
			err = errors.New(outtext.LastLine(tail))
		}
		if err != nil {
			return lineErr(p.Line, "%s: %v", p.Text, err)
		}
	case OpCopy:
		return b.copyStep(ctx, p)
	}
	return nil
}

func (b *build) copyStep(ctx context.Context, p planned) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(b.ctx.writeTar(pw, p.copy)) }()
	user := p.Chown
	if user == "" {
		user = "root"
	}
	_, err := b.builder.PutTar(ctx, sandbox.TarPutRequest{Path: p.copy.dir, User: user}, pr)
	pr.Close()
	if err != nil {
		return lineErr(p.Line, "%s: %v", p.Text, err)
	}
	return nil
}

// finish runs the start command and ready check, saves the template's
// snapshot and gives it the template's name.
func (b *build) finish(ctx context.Context, last string) error {
	if err := b.ensureBuilder(ctx, last); err != nil {
		return err
	}
	if err := b.startAndWait(ctx); err != nil {
		return err
	}
	tmp := randTag(b.o.Name)
	_, err := b.builder.SaveStep(ctx, sandbox.StepSave{Tag: tmp, Final: true, Env: b.plan.Env, Cwd: b.plan.Cwd, User: b.plan.User})
	if err != nil {
		return fmt.Errorf("save the template: %w", err)
	}
	b.made = append(b.made, tmp)
	b.builder.Discard(ctx)
	b.builder = nil
	if _, err := b.m.svc.PublishSnapshot(ctx, tmp, b.o.Name, b.o.PoolSize); err != nil {
		return fmt.Errorf("save the template: %w", err)
	}
	b.made = b.made[:len(b.made)-1]
	return nil
}

// readyTimeout bounds the wait for a ready check to pass.
const readyTimeout = 5 * time.Minute

func (b *build) startAndWait(ctx context.Context) error {
	p := b.plan
	env, err := sandbox.EnvList(p.Env)
	if err != nil {
		return err
	}
	if b.o.Start != "" {
		if _, err := b.builder.StartProcess(ctx, sandbox.ProcessRequest{Shell: b.o.Start, Env: env, Cwd: p.Cwd, User: p.User, Tag: "start"}); err != nil {
			return fmt.Errorf("%w: start command: %v", ErrInvalid, err)
		}
	}
	if b.o.Ready == "" {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	var last string
	for {
		res, err := b.builder.Exec(ctx, sandbox.ExecRequest{Shell: b.o.Ready, Env: env, Cwd: p.Cwd, User: p.User, Timeout: 30 * time.Second})
		if err != nil {
			return fmt.Errorf("ready check: %w", err)
		}
		if res.ExitCode == 0 {
			return nil
		}
		last = outtext.LastLine(res.Stdout + res.Stderr)
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the ready check did not pass within %s (exit %d: %s)", ErrInvalid, readyTimeout, res.ExitCode, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cleanup removes what a failed build saved, keeping what the
// template's current version uses.
func (b *build) cleanup(ctx context.Context) {
	keep := map[string]bool{}
	for _, s := range decodeSteps(b.prev.StepsJSON) {
		keep[s.Tag] = true
	}
	for _, tag := range b.made {
		if !keep[tag] {
			if err := b.m.svc.DeleteSnapshot(ctx, tag); err != nil {
				b.m.log.Warn("remove a failed build's snapshot", "tag", tag, "err", err)
			}
		}
	}
}

// records lists the steps with the caches they have.
func (b *build) records() []StepRecord {
	out := []StepRecord{{Line: b.base.Line, Text: b.base.Text, Tag: b.base.tag}}
	for _, p := range b.steps {
		out = append(out, StepRecord{Line: p.Line, Text: p.Text, Tag: p.tag})
	}
	return out
}

// outputWriter turns a RUN's output into events, holding back a
// character a write cut so that none is garbled.
type outputWriter struct {
	emit    func(Event)
	partial []byte
}

func (w *outputWriter) Write(p []byte) (int, error) {
	whole, rest := outtext.SplitRunes(append(w.partial, p...))
	w.partial = append([]byte(nil), rest...)
	if len(whole) > 0 {
		w.emit(Event{Output: strings.ToValidUTF8(string(whole), "\uFFFD")})
	}
	return len(p), nil
}

func (w *outputWriter) flush() {
	if len(w.partial) > 0 {
		w.emit(Event{Output: strings.ToValidUTF8(string(w.partial), "\uFFFD")})
		w.partial = nil
	}
}
