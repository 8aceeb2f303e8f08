package bench

// The template benchmark: a Dockerfile build, cold and with every step
// cached.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/client"
)

// benchDockerfile is what the template benchmark builds: files made by
// RUN, a COPY from the context, ENV and WORKDIR.
const benchDockerfile = `FROM cove:default
ENV BENCH=1
RUN mkdir -p /opt/bench && seq 1 10000 > /opt/bench/numbers.txt
WORKDIR /opt/bench
COPY data.txt ./
RUN python3 -c "import json; json.dump(list(range(1000)), open('list.json', 'w'))"
`

// benchTemplateContext is the build context: the Dockerfile and 64 KiB of
// data. A nonce in a comment makes each cold build's content its own.
func benchTemplateContext(nonce string) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"Dockerfile", []byte("# " + nonce + "\n" + benchDockerfile)},
		{"data.txt", bytes.Repeat([]byte("cove template bench\n"), 64<<10/20)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	return &buf, tw.Close()
}

// benchTemplates builds a template from the Dockerfile above n times
// under new names (cold: no cache) and then once more each (every step
// cached), and deletes them.
func (b *bencher) benchTemplates(ctx context.Context) []result {
	var cold, cached []float64
	none := 0
	for i := range b.o.TemplateBuilds {
		name := fmt.Sprintf("bench-tmpl-%d-%d", time.Now().UnixNano()%1e6, i)
		build := func() (time.Duration, bool, error) {
			body, err := benchTemplateContext(name)
			if err != nil {
				return 0, false, err
			}
			t0 := time.Now()
			ti, err := b.cl.BuildTemplate(ctx, client.TemplateBuild{Name: name, PoolSize: &none, Context: body}, nil)
			return time.Since(t0), ti.Cached, err
		}
		d, _, err := build()
		if err == nil {
			cold = append(cold, float64(d)/float64(time.Millisecond))
			var wasCached bool
			if d, wasCached, err = build(); err == nil && !wasCached {
				err = errors.New("the rebuild was not every step cached")
			}
			cached = append(cached, float64(d)/float64(time.Millisecond))
		}
		b.deleteTemplate(ctx, name)
		if err != nil {
			return []result{failedResult("template_build_cold", unitMs, err), failedResult("template_build_cached", unitMs, err)}
		}
	}
	rc, rw := msResult("template_build_cold", cold), msResult("template_build_cached", cached)
	b.logf("template build: cold p50 %.0f ms, every step cached p50 %.1f ms over %d", rc.P50, rw.P50, rc.N)
	return []result{rc, rw}
}

func (b *bencher) deleteTemplate(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := b.cl.DeleteTemplate(ctx, name); err != nil && !errors.Is(err, client.ErrNotFound) {
		b.logf("warning: delete template %s: %v", name, err)
	}
}
