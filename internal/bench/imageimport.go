package bench

// The image import benchmark: the time to import a generated OCI image of
// ImageImportMiB (an OCI layout tar uploaded to POST /v1/images), beside
// importing the same archive again, which finds the image made: the cost
// of the upload and its checks alone.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-sandbox/cove/internal/image/ocigen"
)

// imageImportSamples is how many distinct images are imported and timed.
const imageImportSamples = 3

// benchImageImport imports imageImportSamples generated images, each
// deleted after, and times each import and one re-import.
func (b *bencher) benchImageImport(ctx context.Context) result {
	name := fmt.Sprintf("image_import_%d", b.o.ImageImportMiB)
	var lat, again []time.Duration
	for i := range imageImportSamples {
		archive, err := genImageArchive(ctx, b.o.ImageImportMiB, uint64(time.Now().UnixNano())+uint64(i))
		if err != nil {
			return failedResult(name, unitMs, fmt.Errorf("generate the image: %w", err))
		}
		tag := fmt.Sprintf("bench-import-%d-%d", time.Now().UnixNano(), i)
		t0 := time.Now()
		_, err = b.cl.ImportImage(ctx, tag, bytes.NewReader(archive), nil)
		d := time.Since(t0)
		if err == nil {
			t1 := time.Now()
			_, err = b.cl.ImportImage(ctx, tag, bytes.NewReader(archive), nil)
			again = append(again, time.Since(t1))
		}
		if _, derr := b.cl.DeleteImage(context.WithoutCancel(ctx), tag); derr != nil && err == nil {
			err = fmt.Errorf("delete image %s: %w", tag, derr)
		}
		if err != nil {
			return failedResult(name, unitMs, err)
		}
		lat = append(lat, d)
		b.logf("%s %d/%d: %s (%.1f MB/s of archive), again %s", name, i+1, imageImportSamples, fmtMs(d),
			float64(len(archive))/1e6/d.Seconds(), fmtMs(again[len(again)-1]))
	}
	r := latencyResult(name, lat)
	bl := latencyResult("", again)
	r.Baseline = &baseline{Name: "the same archive again (image up to date)", P50: bl.P50, P99: bl.P99, N: bl.N}
	return r
}

// genImageArchive is an OCI layout tar of one layer of mib files of 1 MiB
// each, incompressible (as built toolchains mostly are), from seed.
func genImageArchive(ctx context.Context, mib int, seed uint64) ([]byte, error) {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), byte(seed >> 32)})
	entries := []ocigen.Entry{ocigen.Dir("data/", 0o755, 0, 0)}
	for i := range mib {
		body := make([]byte, 1<<20)
		rng.Read(body)
		e := ocigen.File(fmt.Sprintf("data/f%05d", i), 0o644, 0, 0, "")
		e.Body = body
		entries = append(entries, e)
	}
	layer, err := ocigen.LayerTar(entries)
	if err != nil {
		return nil, err
	}
	img, err := ocigen.Image(v1.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, layer)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := ocigen.WriteLayoutTar(ctx, &buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
