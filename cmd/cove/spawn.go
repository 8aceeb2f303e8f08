package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/pkg/apitype"
)

func runSpawn(ctx context.Context, args []string) error {
	fs, c := newFlagSet("spawn", "spawn [flags] TAG")
	n := fs.Int("n", 1, "how many sandboxes to start from the snapshot")
	ttl := fs.Duration("ttl", 0, "lifetime, e.g. 15m (default: the daemon's)")
	prewarm := fs.Bool("prewarm", false, "also refill the snapshot's warm pool, so the next spawn is served from it")
	quiet := fs.Bool("q", false, "print only the sandbox ids, one a line")
	pos, err := parseArgs(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("give one snapshot TAG (`cove snapshot ls` lists them)")
	}
	if *n < 1 || *n > apitype.MaxN {
		return fmt.Errorf("-n must be between 1 and %d", apitype.MaxN)
	}
	if *ttl != 0 && *ttl < time.Second {
		return fmt.Errorf("--ttl must be at least 1s")
	}
	tag := pos[0]
	cl, daemon, err := c.client()
	if err != nil {
		return err
	}
	sbs, err := cl.CreateSandboxes(ctx, apitype.CreateSandboxRequest{
		SnapshotTag: tag,
		N:           *n,
		TTLSecs:     int64(*ttl / time.Second),
		Prewarm:     *prewarm,
	})
	if err != nil {
		return explain(snapshotHint(err, tag), daemon)
	}
	// Save the tokens before printing: they exist only in this answer.
	rememberTokens("spawn", daemon, sbs)
	return printMade(c.json, *quiet, sbs)
}
