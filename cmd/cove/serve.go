package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/mcp"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/runtime/gvisor"
	"github.com/cove-sandbox/cove/internal/runtime/qemu"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// serveFlags are serve's flags, as cobra parses them.
type serveFlags struct {
	addr, stateDir, imageDir, defaultImage, apiKeyFile, backend, accel, qemuUser, runsc, defaultSnap, logLevel *string

	defaultTTL, maxTTL, startTimeout *time.Duration

	defaultCPUs, maxCPUs, defaultMem, maxMem, maxSandboxes, poolSize, poolMem, startPar *int
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the daemon",
		Long: `Run the cove daemon, as root: the REST API, and MCP at /mcp. On its first
start it writes a new API key to --api-key-file. Sandboxes outlive it, and
are re-attached at its next start.`,
		Example: `  cove serve
  cove serve --addr 0.0.0.0:8080 --backend qemu --max-sandboxes 100`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), f)
		},
	}
	fs := cmd.Flags()
	f.addr = fs.String("addr", "127.0.0.1:8080", "address to listen on")
	f.stateDir = fs.String("state-dir", "/var/lib/cove", "where the database and sandbox state live")
	f.imageDir = fs.String("image-dir", "/var/lib/cove/images", "where guest images live (cove image build)")
	f.defaultImage = fs.String("image", "default", "image for sandboxes that name none")
	f.apiKeyFile = fs.String("api-key-file", defaultAPIKeyFile, "API key file; created with a new key if missing")
	deprecatedAlias(fs, "api-key-file", "token-file")
	f.backend = fs.String("backend", "auto", "isolation backend: auto, gvisor or qemu")
	f.accel = fs.String("accel", "auto", "QEMU accelerator: auto (kvm when a probe guest boots), kvm or tcg")
	f.qemuUser = fs.String("qemu-user", defaultQemuUser(), "unprivileged user QEMU runs as (default cove-qemu when that user exists, as INSTALL_QEMU=1 scripts/install-deps.sh makes it); empty for root")
	f.runsc = fs.String("runsc", "runsc", "path to runsc")
	f.defaultTTL = fs.Duration("default-ttl", 15*time.Minute, "lifetime of a sandbox that asks for none")
	f.maxTTL = fs.Duration("max-ttl", 24*time.Hour, "longest lifetime a sandbox may ask for")
	f.defaultCPUs = fs.Int("default-cpus", 1, "vCPUs of a sandbox that asks for none")
	f.maxCPUs = fs.Int("max-cpus", goruntime.NumCPU(), "most vCPUs a sandbox may ask for")
	f.defaultMem = fs.Int("default-memory-mib", 512, "memory of a sandbox that asks for none")
	f.maxMem = fs.Int("max-memory-mib", 8192, "most memory a sandbox may ask for")
	f.maxSandboxes = fs.Int("max-sandboxes", 500, "most sandboxes alive at once")
	f.poolSize = fs.Int("pool-size", 2, "ready sandboxes a built snapshot keeps restored, unless it says otherwise")
	f.poolMem = fs.Int("pool-memory-mib", 4096, "memory budget (as sandbox limits) of all warm pools together")
	f.defaultSnap = fs.String("default-snapshot", "default", "snapshot kept built from the default image at start; empty for none")
	f.logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	f.startTimeout = fs.Duration("start-timeout", 60*time.Second, "how long a new sandbox's agent may take to answer")
	f.startPar = fs.Int("start-parallelism", 0, "sandboxes one create call starts at once (0: 8)")
	return cmd
}

func runServe(ctx context.Context, f serveFlags) error {
	// The flags, by the names the set-up below reads them.
	var (
		addr         = f.addr
		stateDir     = f.stateDir
		imageDir     = f.imageDir
		defaultImage = f.defaultImage
		apiKeyFile   = f.apiKeyFile
		backend      = f.backend
		accel        = f.accel
		qemuUser     = f.qemuUser
		runsc        = f.runsc
		defaultTTL   = f.defaultTTL
		maxTTL       = f.maxTTL
		defaultCPUs  = f.defaultCPUs
		maxCPUs      = f.maxCPUs
		defaultMem   = f.defaultMem
		maxMem       = f.maxMem
		maxSandboxes = f.maxSandboxes
		poolSize     = f.poolSize
		poolMem      = f.poolMem
		defaultSnap  = f.defaultSnap
		logLevel     = f.logLevel
		startTimeout = f.startTimeout
		startPar     = f.startPar
	)
	if *startTimeout <= 0 {
		return fmt.Errorf("--start-timeout must be positive, got %s", *startTimeout)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if os.Geteuid() != 0 {
		return errors.New("the daemon needs root (network namespaces, runsc): run it as root")
	}
	key, err := loadOrCreateKey(*apiKeyFile)
	if err != nil {
		return err
	}
	state, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}

	images := imageResolver{dir: *imageDir}
	_, files, _ := images.Resolve(*defaultImage) // not found: the probe says there are no VM files
	name, acc, reason, err := chooseBackend(ctx, *backend, *accel, files)
	if err != nil {
		return err
	}
	log.Info("backend chosen", "backend", name, "accel", acc, "why", reason)
	var rt runtime.Runtime
	switch name {
	case "qemu":
		q, err := qemu.New(qemu.Config{Dir: filepath.Join(state, "sandboxes"), Accel: acc, User: *qemuUser, Logger: log})
		if err != nil {
			return err
		}
		rt = q
	default:
		g, err := gvisor.New(gvisor.Config{Runsc: *runsc, Dir: filepath.Join(state, "sandboxes"), Logger: log})
		if err != nil {
			return err
		}
		rt = g
	}
	defer rt.Close()

	st, err := store.Open(ctx, filepath.Join(state, "cove.db"))
	if err != nil {
		return err
	}
	defer st.Close()

	if _, _, err := images.Resolve(*defaultImage); err != nil {
		log.Warn("default image not found: sandboxes cannot start until it is built (cove image build)", "image", *defaultImage, "dir", *imageDir, "err", err)
	}
	limits := sandbox.Limits{
		DefaultTTL: *defaultTTL, MaxTTL: *maxTTL, DefaultCPUs: *defaultCPUs, MaxCPUs: *maxCPUs,
		DefaultMemoryMiB: *defaultMem, MaxMemoryMiB: *maxMem, MaxSandboxes: *maxSandboxes,
	}
	svc := sandbox.New(sandbox.Config{
		Runtime: rt, Store: st, Images: images, DefaultImage: *defaultImage, Limits: limits, Logger: log,
		SnapshotDir: filepath.Join(state, "snapshots"), DefaultPoolSize: *poolSize, PoolMemoryMiB: *poolMem,
		StartTimeout: *startTimeout, StartParallelism: *startPar,
	})
	if err := svc.Recover(ctx); err != nil {
		return fmt.Errorf("recover state: %w", err)
	}
	defer svc.Close()
	if *defaultSnap != "" {
		if err := svc.EnsureSnapshot(ctx, *defaultSnap, *defaultImage); err != nil {
			log.Warn("default snapshot not available", "tag", *defaultSnap, "err", err)
		}
	}

	runtimeVersion := rt.Version(ctx)
	info := func(ctx context.Context) apitype.Info {
		return apitype.Info{
			Version: version, Backend: name, BackendReason: reason, RuntimeVer: runtimeVersion, Accel: acc,
			DefaultImage: *defaultImage, Sandboxes: svc.Count(),
			Limits: apitype.Limits{
				DefaultTTLSecs: int64(limits.DefaultTTL.Seconds()), MaxTTLSecs: int64(limits.MaxTTL.Seconds()),
				DefaultCPUs: limits.DefaultCPUs, MaxCPUs: limits.MaxCPUs,
				DefaultMemoryMiB: limits.DefaultMemoryMiB, MaxMemoryMiB: limits.MaxMemoryMiB,
				MaxSandboxes: limits.MaxSandboxes, MaxN: sandbox.MaxN,
			},
		}
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w (is another cove daemon running? stop it with `make down`)", err)
	}
	// /mcp: the MCP tools call this daemon's own REST API over loopback
	// through pkg/client, the same code path as `cove mcp` over stdio.
	mcpSrv := mcp.New(mcp.Config{
		API:     client.New(loopbackURL(l.Addr()), key, client.WithUserAgent("cove-mcp/"+version)),
		Version: version, Logger: log,
	})
	handler := api.New(api.Config{Service: svc, APIKey: key, Version: version, Info: info, Logger: log, MCP: mcpSrv.Handler()})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	log.Info("cove serving", "addr", l.Addr().String(), "version", version, "sandboxes", svc.Count())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running and are re-attached at the next start")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

// chooseBackend picks the isolation backend (and QEMU's accelerator) and
// says why. auto takes QEMU only with KVM, and only when a probe guest
// really boots under it; TCG is for those who ask (--backend qemu --accel
// tcg).
func chooseBackend(ctx context.Context, want, accel string, vf runtime.ImageFiles) (name, acc, reason string, err error) {
	switch accel {
	case "auto", "kvm", "tcg":
	default:
		return "", "", "", fmt.Errorf("--accel %q: want auto, kvm or tcg", accel)
	}
	switch want {
	case "gvisor":
		return "gvisor", "", "chosen with --backend gvisor", nil
	case "qemu":
		switch accel {
		case "kvm", "tcg":
			return "qemu", accel, "chosen with --backend qemu --accel " + accel, nil
		}
		if err := qemu.ProbeKVM(ctx, "", vf); err != nil {
			return "qemu", "tcg", "chosen with --backend qemu; TCG because " + err.Error(), nil
		}
		return "qemu", "kvm", "chosen with --backend qemu; a KVM probe guest booted", nil
	case "auto":
		if accel == "tcg" {
			return "gvisor", "", "auto: --accel tcg does not pick QEMU on its own (use --backend qemu); gVisor needs no hardware virtualisation", nil
		}
		if err := qemu.ProbeKVM(ctx, "", vf); err != nil {
			return "gvisor", "", "auto: QEMU+KVM unusable: " + err.Error() + "; gVisor needs no hardware virtualisation", nil
		}
		return "qemu", "kvm", "auto: a KVM probe guest booted: QEMU microVMs under KVM", nil
	}
	return "", "", "", fmt.Errorf("--backend %q: want auto, gvisor or qemu", want)
}

// loadOrCreateKey reads the API key, creating the file with a fresh key on
// first start.
func loadOrCreateKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		key := strings.TrimSpace(string(b))
		if key == "" {
			return "", fmt.Errorf("API key file %s is empty: delete it to have a new key generated", path)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read API key file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	var raw [32]byte
	rand.Read(raw[:])
	key := hex.EncodeToString(raw[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create API key file: %w", err)
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return key, f.Close()
}

// imageResolver adapts the image directory to the sandbox service.
type imageResolver struct{ dir string }

func (r imageResolver) Resolve(nameOrID string) (id string, files runtime.ImageFiles, err error) {
	img, err := image.Resolve(r.dir, nameOrID)
	if err != nil {
		return "", runtime.ImageFiles{}, err
	}
	vm := image.VMFilesFor(img.Rootfs)
	return img.ID, runtime.ImageFiles{Rootfs: img.Rootfs, Kernel: vm.Kernel, Initrd: vm.Initrd, Disk: vm.Disk}, nil
}

// defaultQemuUser is cove-qemu if that user exists, else "" (root).
func defaultQemuUser() string {
	if _, err := user.Lookup("cove-qemu"); err == nil {
		return "cove-qemu"
	}
	return ""
}
