package sandbox

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestHiddenTag(t *testing.T) {
	for tag, want := range map[string]bool{"py": false, "py.step-0123": true, "py.build-ab": true, "a.b-c": false} {
		if HiddenTag(tag) != want {
			t.Errorf("HiddenTag(%q) = %v", tag, !want)
		}
	}
}

// TestTemplateSteps: a template's step snapshots are hidden from lists,
// its result takes its name only when published, and other snapshots
// cannot take a template step's tag.
func TestTemplateSteps(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	if _, err := e.svc.BuildSnapshot(ctx, BuildOptions{Tag: "x.step-01", Warm: "true"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("BuildSnapshot of a step's tag: %v, want ErrInvalid", err)
	}
	if _, err := e.svc.BuildStepBase(ctx, BuildOptions{Tag: "tmpl.step-01", Warm: "true"}); err != nil {
		t.Fatal(err)
	}
	if !e.svc.Spawnable(context.Background(), "tmpl.step-01") || len(e.svc.Snapshots(context.Background())) != 0 {
		t.Fatalf("step: spawnable %v, listed %v", e.svc.Spawnable(context.Background(), "tmpl.step-01"), e.svc.Snapshots(context.Background()))
	}
	sb, err := e.svc.StartBuilder(ctx, "tmpl.step-01", nil)
	if err != nil {
		t.Fatal(err)
	}
	code, out, err := sb.RunStep(ctx, StepRun{Shell: "echo hi; exit 3", Cwd: "/"}, nil)
	if err != nil || code != 3 || out != "hi\n" {
		t.Errorf("RunStep: exit %d, output %q, %v", code, out, err)
	}
	if _, err := sb.SaveStep(ctx, StepSave{Tag: "tmpl.step-02"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.SaveStep(ctx, StepSave{Tag: "tmpl.build-aa", Final: true, Env: map[string]string{"A": "1"}, Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	sb.Discard(ctx)
	got := e.svc.HiddenSnapshots("tmpl")
	slices.Sort(got)
	if !slices.Equal(got, []string{"tmpl.build-aa", "tmpl.step-01", "tmpl.step-02"}) {
		t.Errorf("hidden snapshots %v", got)
	}
	si, err := e.svc.PublishSnapshot(ctx, "tmpl.build-aa", "tmpl", 0)
	if err != nil {
		t.Fatal(err)
	}
	if si.Tag != "tmpl" || si.Cwd != "/" || envMap(si.EnvJSON)["A"] != "1" || si.TokenHash != "" {
		t.Errorf("published %+v", si)
	}
	if l := e.svc.Snapshots(context.Background()); len(l) != 1 || l[0].Tag != "tmpl" {
		t.Errorf("listed %v", l)
	}
	// After a restart the published snapshot is there under its name.
	e.restart(t)
	if _, err := e.svc.Snapshot(context.Background(), "tmpl"); err != nil {
		t.Errorf("after a restart: %v", err)
	}
	if _, err := e.svc.Snapshot(context.Background(), "tmpl.build-aa"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the build's tag after a restart: %v", err)
	}
}
