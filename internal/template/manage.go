package template

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

func decodeSteps(v string) []StepRecord {
	var out []StepRecord
	if v != "" {
		_ = json.Unmarshal([]byte(v), &out) // one that does not decode has none
	}
	return out
}

func (m *Manager) info(ctx context.Context, t store.Template) Info {
	steps := decodeSteps(t.StepsJSON)
	i := Info{Name: t.Name, Base: t.Base, Image: t.Image, Digest: t.Digest, Steps: steps,
		BuildTime: t.BuildTime, CreatedAt: t.CreatedAt}
	if si, err := m.svc.Snapshot(ctx, t.Name); err == nil {
		i.Snapshot = &si
		i.SizeBytes = si.SizeBytes
	}
	seen := map[string]bool{}
	for _, s := range steps {
		if s.Tag != "" && !seen[s.Tag] {
			seen[s.Tag] = true
			i.SizeBytes += m.svc.SnapshotSize(s.Tag)
		}
	}
	return i
}

// List describes every template ctx's caller may see (its tenant's and the
// shared ones; tenant.CanSee), by name.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	recs, err := m.cfg.Store.Templates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, t := range recs {
		if tenant.CanSee(ctx, t.Tenant) {
			out = append(out, m.info(ctx, t))
		}
	}
	return out, nil
}

// Get describes one template.
func (m *Manager) Get(ctx context.Context, name string) (Info, error) {
	t, ok, err := m.cfg.Store.GetTemplate(ctx, name)
	if err != nil {
		return Info{}, err
	}
	if !ok || !tenant.CanSee(ctx, t.Tenant) { // another tenant's is not there, to this caller
		return Info{}, fmt.Errorf("template %q: %w", name, sandbox.ErrNotFound)
	}
	return m.info(ctx, t), nil
}

// Delete removes a template: its snapshot (with its warm pool) and its
// step caches. One that live sandboxes were spawned from is refused.
func (m *Manager) Delete(ctx context.Context, name string) error {
	release, err := m.claim(name)
	if err != nil {
		return err
	}
	defer release()
	if _, err := m.Get(ctx, name); err != nil {
		return err
	}
	if t, _, err := m.cfg.Store.GetTemplate(ctx, name); err != nil {
		return err
	} else if !tenant.CanChange(ctx, t.Tenant) {
		return fmt.Errorf("%w: template %q is the daemon's, shared by every tenant: only an admin key may delete it", sandbox.ErrForbidden, name)
	}
	if si, err := m.svc.Snapshot(ctx, name); err == nil {
		if si.Children > 0 {
			return fmt.Errorf("%w: %d live sandboxes were spawned from template %q: kill them first", sandbox.ErrConflict, si.Children, name)
		}
		if err := m.svc.DeleteSnapshot(ctx, name); err != nil {
			return err
		}
	}
	for _, tag := range m.svc.HiddenSnapshots(name) {
		if err := m.svc.DeleteSnapshot(ctx, tag); err != nil {
			return fmt.Errorf("remove template %s's step cache: %w", name, err)
		}
	}
	if err := m.cfg.Store.DeleteTemplate(ctx, name); err != nil {
		return err
	}
	m.log.Info("template deleted", "name", name)
	return nil
}

// Recover drops what a daemon killed during a build left: step caches
// and results of templates with no record, and records whose snapshot
// is gone (with their caches). It waits for the service's recovery.
func (m *Manager) Recover(ctx context.Context) error {
	select {
	case <-m.svc.Recovered():
	case <-ctx.Done():
		return ctx.Err()
	}
	// A builder that outlived its build runs from a step's cache.
	for _, sb := range m.svc.List(ctx) {
		if sandbox.HiddenTag(sb.SnapshotTag) {
			m.log.Info("removing the builder of an unfinished template build", "id", sb.ID)
			if err := m.svc.Delete(ctx, sb.ID); err != nil {
				m.log.Warn("remove a template builder", "id", sb.ID, "err", err)
			}
		}
	}
	recs, err := m.cfg.Store.Templates(ctx)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, t := range recs {
		if _, err := m.svc.Snapshot(ctx, t.Name); err != nil {
			m.log.Warn("template lost its snapshot; dropping it", "name", t.Name)
			if err := m.cfg.Store.DeleteTemplate(ctx, t.Name); err != nil {
				return err
			}
			continue
		}
		for _, s := range decodeSteps(t.StepsJSON) {
			keep[s.Tag] = true
		}
	}
	for _, tag := range m.svc.AllHiddenSnapshots() {
		if keep[tag] {
			continue
		}
		m.log.Info("removing an unfinished template build's snapshot", "tag", tag)
		if err := m.svc.DeleteSnapshot(ctx, tag); err != nil {
			m.log.Warn("remove a template build's snapshot", "tag", tag, "err", err)
		}
	}
	return nil
}
