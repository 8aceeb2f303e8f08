package main

import (
	"context"
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
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/api"
	"github.com/cove-sandbox/cove/internal/hostres"
	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/keys"
	"github.com/cove-sandbox/cove/internal/mcp"
	"github.com/cove-sandbox/cove/internal/obs"
	"github.com/cove-sandbox/cove/internal/randhex"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/runtime/gvisor"
	"github.com/cove-sandbox/cove/internal/runtime/qemu"
	"github.com/cove-sandbox/cove/internal/sandbox"
	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/template"
	"github.com/cove-sandbox/cove/internal/tenant"
	"github.com/cove-sandbox/cove/internal/usage"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// serveFlags are serve's flags.
type serveFlags struct {
	addr, stateDir, imageDir, defaultImage, apiKeyFile, backend, accel, qemuUser, qemuUIDs, runsc, defaultSnap, logLevel, auditLog string

	defaultTTL, maxTTL, startTimeout, deadKeep time.Duration

	defaultCPUs, maxCPUs, defaultMem, maxMem, maxSandboxes, poolSize, poolMem, startPar int

	defaultDisk, maxDisk, defaultPids, maxPids, openFiles, memBudget int
	maxImportMiB, hostFloor                                          int64
	overcommit                                                       float64

	netFlags
	e2bFlags
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
			f.presetsGiven = cmd.Flags().Changed("network-presets")
			return runServe(cmd.Context(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/cove", "where the database and sandbox state live")
	fs.StringVar(&f.imageDir, "image-dir", "/var/lib/cove/images", "where guest images live (cove image build)")
	fs.Int64Var(&f.maxImportMiB, "max-image-import-mib", image.DefaultImportMaxBytes>>20, "most MiB an image import (POST /v1/images) may upload, and unpack")
	fs.StringVar(&f.defaultImage, "image", "default", "image for sandboxes that name none")
	fs.StringVar(&f.apiKeyFile, "api-key-file", defaultAPIKeyFile, "API key file; created with a new key if missing")
	deprecatedAlias(fs, "api-key-file", "token-file")
	fs.StringVar(&f.backend, "backend", "auto", "isolation backend: auto, gvisor or qemu")
	fs.StringVar(&f.accel, "accel", "auto", "QEMU accelerator: auto (kvm when a probe guest boots), kvm or tcg")
	fs.StringVar(&f.qemuUser, "qemu-user", defaultQemuUser(), "unprivileged user QEMU runs as (default cove-qemu when that user exists, as INSTALL_QEMU=1 scripts/install-deps.sh makes it); empty for root")
	fs.StringVar(&f.qemuUIDs, "qemu-uids", "auto", "`BASE:COUNT`: run each VM's QEMU as a host uid of its own from this range (uids at least 1000, unused on the host), with --qemu-user's group, which reads snapshots; auto: "+qemu.DefaultUIDs.String()+" where QEMU and --qemu-user allow it; off: every VM as --qemu-user")
	fs.StringVar(&f.runsc, "runsc", "runsc", "path to runsc")
	fs.DurationVar(&f.defaultTTL, "default-ttl", 15*time.Minute, "lifetime of a sandbox that asks for none")
	fs.DurationVar(&f.maxTTL, "max-ttl", 24*time.Hour, "longest lifetime a sandbox may ask for")
	fs.IntVar(&f.defaultCPUs, "default-cpus", 1, "vCPUs of a sandbox that asks for none")
	fs.IntVar(&f.maxCPUs, "max-cpus", goruntime.NumCPU(), "most vCPUs a sandbox may ask for")
	fs.IntVar(&f.defaultMem, "default-memory-mib", 512, "memory of a sandbox that asks for none")
	fs.IntVar(&f.maxMem, "max-memory-mib", 8192, "most memory a sandbox may ask for")
	fs.IntVar(&f.maxSandboxes, "max-sandboxes", 0, "most sandboxes alive at once (0: as many as the host's memory holds at an idle sandbox's cost)")
	fs.Int64Var(&f.hostFloor, "host-memory-floor-mib", -1, "host memory (MemAvailable) a create must leave free, in MiB (-1: 5% of the host's, at least 1024; 0: none)")
	fs.IntVar(&f.defaultDisk, "default-disk-mib", 4096, "disk space a sandbox that asks for none may write, in MiB")
	fs.IntVar(&f.maxDisk, "max-disk-mib", 65536, "most disk space a sandbox may ask for, in MiB")
	fs.IntVar(&f.defaultPids, "default-pids", 1024, "processes and threads of a sandbox that asks for no other limit")
	fs.IntVar(&f.maxPids, "max-pids", 4096, "most processes and threads a sandbox may ask for")
	fs.IntVar(&f.openFiles, "open-files", 4096, "files each process in a sandbox may have open")
	fs.IntVar(&f.memBudget, "memory-budget-mib", 0, "memory limits of all sandboxes together (warm pools included) a create must fit in, in MiB (0: host memory times --memory-overcommit)")
	fs.Float64Var(&f.overcommit, "memory-overcommit", 4, "the default memory budget as a multiple of the host's memory")
	fs.IntVar(&f.poolSize, "pool-size", 2, "ready sandboxes a built snapshot keeps restored, unless it says otherwise")
	fs.IntVar(&f.poolMem, "pool-memory-mib", 4096, "memory budget (as sandbox limits) of all warm pools together")
	fs.StringVar(&f.defaultSnap, "default-snapshot", "default", "snapshot kept built from the default image at start; empty for none")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.auditLog, "audit-log", "", "JSON-lines audit log of every mutating API call, rotated to PATH.1 at 64 MiB (default: audit.log in --state-dir)")
	fs.DurationVar(&f.startTimeout, "start-timeout", 60*time.Second, "how long a new sandbox's agent may take to answer")
	fs.IntVar(&f.startPar, "start-parallelism", 0, "sandboxes one create call starts at once (0: 8)")
	fs.DurationVar(&f.deadKeep, "dead-keep", 10*time.Minute, "how long a sandbox that died stays listed, with why, before it is forgotten")
	f.netFlags.register(fs)
	f.e2bFlags.register(fs)
	return cmd
}

func (f serveFlags) limits() sandbox.Limits {
	return sandbox.Limits{
		DefaultTTL: f.defaultTTL, MaxTTL: f.maxTTL, DefaultCPUs: f.defaultCPUs, MaxCPUs: f.maxCPUs,
		DefaultMemoryMiB: f.defaultMem, MaxMemoryMiB: f.maxMem, MaxSandboxes: f.maxSandboxes,
		DefaultDiskMiB: f.defaultDisk, MaxDiskMiB: f.maxDisk, DefaultPids: f.defaultPids, MaxPids: f.maxPids,
		OpenFiles: f.openFiles, MemoryBudgetMiB: f.memBudget, HostMemoryFloorMiB: f.hostFloor,
	}
}

// runServe runs the daemon until ctx ends: the runtime, the store and the
// sandbox service below the HTTP API.
func runServe(ctx context.Context, f serveFlags) error {
	if f.startTimeout <= 0 {
		return fmt.Errorf("--start-timeout must be positive, got %s", f.startTimeout)
	}
	if f.deadKeep <= 0 {
		return fmt.Errorf("--dead-keep must be positive, got %s", f.deadKeep)
	}
	if err := f.resolveLimits(); err != nil {
		return err
	}
	if err := f.netFlags.check(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	// Every line logged with a request's context names its request id.
	log := slog.New(obs.NewLogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	if os.Geteuid() != 0 {
		return errors.New("the daemon needs root (network namespaces, runsc): run it as root")
	}
	key, err := loadOrCreateKey(f.apiKeyFile)
	if err != nil {
		return err
	}
	state, err := filepath.Abs(f.stateDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	images := imageResolver{dir: f.imageDir}
	if err := image.CleanStale(f.imageDir); err != nil {
		log.Warn("remove the leftovers of interrupted image imports", "dir", f.imageDir, "err", err)
	}
	rt, be, err := openRuntime(ctx, f, filepath.Join(state, "sandboxes"), images, log)
	if err != nil {
		return err
	}
	defer rt.Close()
	cost := hostCost(be.name)
	if err := f.resolveHostLimits(cost); err != nil {
		return err
	}

	st, err := store.Open(ctx, filepath.Join(state, "cove.db"))
	if err != nil {
		return err
	}
	defer st.Close()

	// The token file's key is the bootstrap admin key; those made with
	// POST /v1/keys are in the store.
	km, err := keys.New(ctx, keys.Config{Store: st, Bootstrap: key, Logger: log})
	if err != nil {
		return err
	}

	network, presets, closeNetwork, err := openNetwork(f, log)
	if err != nil {
		return err
	}
	defer closeNetwork() // after the service's Close, which detaches every sandbox

	if _, _, err := images.Resolve(f.defaultImage); err != nil {
		log.Warn("default image not found: sandboxes cannot start until it is built (cove image build)", "image", f.defaultImage, "dir", f.imageDir, "err", err)
	}
	usageMeter, stopMeter := startMeter(ctx, st, rt, log)
	defer stopMeter() // after the service's Close, before the store's
	svc := sandbox.New(sandbox.Config{
		Runtime: rt, Store: st, Images: images, DefaultImage: f.defaultImage, Limits: f.limits(), Logger: log,
		SnapshotDir: filepath.Join(state, "snapshots"), DefaultPoolSize: f.poolSize, PoolMemoryMiB: f.poolMem,
		StartTimeout: f.startTimeout, StartParallelism: f.startPar, DeadKeep: f.deadKeep, Network: network,
		Meter: usageMeter, TokenSealKey: tokenSealKey(key), Host: hostres.Read, HostCost: cost,
	})
	// Recover reads the records and checks the sandboxes in the
	// background: the API serves at once, and the default snapshot is
	// built (when it must be) meanwhile, a spawn from it answering 503
	// with Retry-After until it is ready.
	if err := svc.Recover(ctx); err != nil {
		return fmt.Errorf("recover state: %w", err)
	}
	defer svc.Close()
	var bg sync.WaitGroup
	defer bg.Wait() // before svc.Close
	if f.defaultSnap != "" {
		bg.Go(func() {
			if err := svc.EnsureSnapshot(ctx, f.defaultSnap, f.defaultImage); err != nil && ctx.Err() == nil {
				log.Warn("default snapshot not available", "tag", f.defaultSnap, "err", err)
			}
		})
	}
	be.version = rt.Version(ctx)
	tm := newTemplates(f, svc, st, state, be, log)
	bg.Go(func() {
		if err := tm.Recover(ctx); err != nil && ctx.Err() == nil {
			log.Warn("template recovery", "err", err)
		}
	})
	return serveHTTP(ctx, f, state, key, km, svc, usageMeter, tm, be, presets, log)
}

// newTemplates is the daemon's template builder. A FROM naming a
// registry image pulls it into the image store.
func newTemplates(f serveFlags, svc *sandbox.Service, st *store.Store, state string, be backendInfo, log *slog.Logger) *template.Manager {
	puller := image.Puller{Dir: f.imageDir, VM: be.name == "qemu", MaxBytes: f.maxImportMiB << 20, Logger: log,
		Agent: func() (string, error) { return image.DefaultAgent(f.imageDir) }}
	return template.New(template.Config{Service: svc, Store: st, TmpDir: state, Logger: log, ResolveFrom: puller.Pull})
}

// serveHTTP serves the API (and /mcp, and preview URLs) on f.addr, and
// preview URLs over HTTPS on f.previewHTTPSAddr if set, until ctx ends.
func serveHTTP(ctx context.Context, f serveFlags, state, key string, km *keys.Manager, svc *sandbox.Service, usageMeter *usage.Meter, tm *template.Manager, be backendInfo, presets []string, log *slog.Logger) error {
	limits := f.limits()
	audit, err := openAudit(f.auditLog, state)
	if err != nil {
		return err
	}
	defer audit.Close()
	prev, tlsCfg, caPath, err := openPreview(f, state, svc, log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listen: %w (is another cove daemon running? stop it with `make down`)", err)
	}
	var tl net.Listener
	if tlsCfg != nil {
		if tl, err = net.Listen("tcp", f.previewHTTPSAddr); err != nil {
			l.Close()
			return fmt.Errorf("listen on --preview-https-addr: %w", err)
		}
	}
	netInfo := apitype.NetworkInfo{Enabled: true, Presets: presets, PreviewDomain: f.previewDomain,
		PreviewHTTPSPort: listenPort(tl), PreviewCA: caPath}
	info := func(ctx context.Context) apitype.Info {
		return apitype.Info{
			Version: version, Backend: be.name, BackendReason: be.reason, RuntimeVer: be.version, Accel: be.accel,
			DefaultImage: f.defaultImage, Sandboxes: svc.Count(), Recovering: svc.Recovering(),
			Limits: apitype.Limits{
				DefaultTTLSecs: int64(limits.DefaultTTL.Seconds()), MaxTTLSecs: int64(limits.MaxTTL.Seconds()),
				DefaultCPUs: limits.DefaultCPUs, MaxCPUs: limits.MaxCPUs,
				DefaultMemoryMiB: limits.DefaultMemoryMiB, MaxMemoryMiB: limits.MaxMemoryMiB,
				MaxSandboxes: limits.MaxSandboxes, MaxN: sandbox.MaxN,
				DefaultDiskMiB: limits.DefaultDiskMiB, MaxDiskMiB: limits.MaxDiskMiB,
				DefaultPids: limits.DefaultPids, MaxPids: limits.MaxPids, OpenFiles: limits.OpenFiles,
				MemoryBudgetMiB: limits.MemoryBudgetMiB,
			},
			Network: netInfo,
		}
	}
	// /mcp: the MCP tools call this daemon's own REST API over loopback
	// through pkg/client, the same code path as `cove mcp` over stdio,
	// each with the key of the request that carried it; a session is its
	// opener's, and ends when that key is revoked.
	mcpAPI := client.New(loopbackURL(l.Addr()), key, client.WithUserAgent("cove-mcp/"+version))
	mcpSrv := mcp.New(mcp.Config{
		API: mcpAPI, Version: version, Logger: log,
		ForKey: func(k string) mcp.API { return mcpAPI.WithAPIKey(k) },
		Caller: func(ctx context.Context) string {
			p, _ := tenant.FromContext(ctx)
			return p.KeyID
		},
	})
	km.OnRevoke(func(id string) {
		if n := mcpSrv.CloseSessionsOf(id); n > 0 {
			log.Info("MCP sessions of a revoked key closed", "key", id, "sessions", n)
		}
	})
	handler := api.New(api.Config{Service: svc, Templates: tm, APIKey: key, Keys: km, Version: version, Info: info, Logger: log, MCP: mcpSrv.Handler(), Audit: audit,
		Usage: usageMeter,
		UsageQuotas: api.UsageQuotas{Limits: func(_ context.Context, name string) (tenant.Limits, bool) {
			return km.TenantLimits(name)
		},
			// The disk a tenant's snapshots, templates, checkpoints and
			// paused sandboxes take, as its max_disk_mib quota counts it.
			DiskMiB: func(ctx context.Context, tenantName string) (int64, bool) {
				return svc.TenantUse(ctx, tenantName).DiskMiB, true
			}},
		Preview: prev, PreviewPort: listenPort(l), PreviewHTTPSPort: netInfo.PreviewHTTPSPort,
		Images: api.ImageStore{Dir: f.imageDir, VM: be.name == "qemu", Default: f.defaultImage, MaxBytes: f.maxImportMiB << 20}})
	newServer := func(handler http.Handler) *http.Server {
		return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	}
	servers := []*http.Server{newServer(handler)}
	errc := make(chan error, 4)
	go func() { errc <- servers[0].Serve(l) }()
	e2bServers, closeEnvd, err := startE2B(ctx, f, loopbackURL(l.Addr()), key, f.e2bDomainFor(listenPort(l), netInfo.PreviewHTTPSPort),
		svc.TokenForCheck, newServer, errc, log)
	defer closeEnvd()
	servers = append(servers, e2bServers...)
	if err != nil {
		for _, srv := range servers {
			srv.Close()
		}
		return err
	}
	if tl != nil {
		srv := newServer(previewOnly(prev))
		srv.TLSConfig = tlsCfg
		servers = append(servers, srv)
		go func() { errc <- srv.ServeTLS(tl, "", "") }()
		log.Info("serving preview URLs over HTTPS", "addr", tl.Addr().String())
	}
	log.Info("cove serving", "addr", l.Addr().String(), "version", version, "sandboxes", svc.Count())
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
		log.Info("shutting down; sandboxes keep running and are re-attached at the next start")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		srv.Shutdown(sctx)
	}
	return serveErr
}

// backendInfo is the backend the daemon chose, and why, for cove info.
type backendInfo struct{ name, accel, reason, version string }

// openRuntime chooses the backend and opens its runtime over dir.
func openRuntime(ctx context.Context, f serveFlags, dir string, images imageResolver, log *slog.Logger) (runtime.Runtime, backendInfo, error) {
	_, files, _ := images.Resolve(f.defaultImage) // not found: the probe says there are no VM files
	name, acc, reason, err := chooseBackend(ctx, f.backend, f.accel, files)
	if err != nil {
		return nil, backendInfo{}, err
	}
	log.Info("backend chosen", "backend", name, "accel", acc, "why", reason)
	be := backendInfo{name: name, accel: acc, reason: reason}
	var rt runtime.Runtime
	if name == "qemu" {
		rt, err = newQEMU(qemu.Config{Dir: dir, Accel: acc, User: f.qemuUser, Logger: log}, f.qemuUIDs, log)
	} else {
		rt, err = gvisor.New(gvisor.Config{Runsc: f.runsc, Dir: dir, Logger: log})
	}
	if err != nil {
		return nil, backendInfo{}, err
	}
	return rt, be, nil
}

// newQEMU makes the QEMU runtime with the uids --qemu-uids asks for: auto
// is the default range when there is an unprivileged QEMU user, and falls
// back to that one user, with a warning, where QEMU cannot do one per VM.
func newQEMU(cfg qemu.Config, uids string, log *slog.Logger) (runtime.Runtime, error) {
	auto := uids == "auto"
	switch {
	case uids == "off" || (auto && cfg.User == ""):
		return qemu.New(cfg)
	case auto:
		cfg.UIDs = qemu.DefaultUIDs
	default:
		r, err := qemu.ParseUIDRange(uids)
		if err != nil {
			return nil, fmt.Errorf("--qemu-uids: %w", err)
		}
		cfg.UIDs = r
	}
	rt, err := qemu.New(cfg)
	if auto && errors.Is(err, qemu.ErrUIDsUnsupported) {
		log.Warn("every VM runs as the one QEMU user: this QEMU cannot give each its own uid", "user", cfg.User, "err", err)
		cfg.UIDs = qemu.UIDRange{}
		return qemu.New(cfg)
	}
	return rt, err
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
	key := randhex.New(32)
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

// openAudit opens the audit log at path, or audit.log in the state
// directory when path is empty.
func openAudit(path, state string) (*obs.Audit, error) {
	if path == "" {
		path = filepath.Join(state, "audit.log")
	}
	a, err := obs.OpenAudit(path, 0)
	if err != nil {
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	return a, nil
}
