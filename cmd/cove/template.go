package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/moby/patternmatcher"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/template"
	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

func newTemplateCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Build templates from a Dockerfile, list and remove them",
		Long: `A template is a snapshot built from a Dockerfile: cove spawn NAME starts
sandboxes from it. Each step is cached by content hash, so a rebuild runs
only the steps from the first that changed.`,
		Example: `  cove template build -t py-tools .
  cove template build -f ci/Dockerfile -t web --start 'python3 -m http.server 8000' --ready 'curl -fs localhost:8000' .
  cove template ls
  cove template rm web`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(newTemplateBuildCmd(cfg), newTemplateLsCmd(cfg), newTemplateRmCmd(cfg))
	return cmd
}

func newTemplateBuildCmd(cfg *clientConfig) *cobra.Command {
	var (
		b         client.TemplateBuild
		file      string
		buildArgs []string
		asJSON    bool
		pf        policyFlags
		pool      int
	)
	cmd := &cobra.Command{
		Use:   "build [flags] -t NAME [CONTEXT]",
		Short: "Build a template from a Dockerfile",
		Long: `Build template NAME from a Dockerfile (-f, default CONTEXT/Dockerfile) and
the files of CONTEXT (default .), leaving out what CONTEXT/.dockerignore
excludes. RUN steps run in a cove sandbox, with the egress the policy flags
give. --start runs in the background and --ready is retried until it
succeeds before the template is saved. Progress shows on stderr.`,
		Example: `  cove template build -t tools .
  cove template build -t tools --build-arg VERSION=1.2 --preset pypi .`,
		Args:              nArgs(0, 1, "give at most one CONTEXT directory"),
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if b.Name == "" {
				return usageErrorf("give the template's name with -t NAME")
			}
			var err error
			if b.BuildArgs, err = parseBuildArgs(buildArgs); err != nil {
				return err
			}
			b.Network = pf.policy()
			if pool >= 0 {
				b.PoolSize = &pool
			}
			pr, pw := io.Pipe()
			dfName, err := contextDockerfile(dir, file)
			if err != nil {
				return err
			}
			b.Dockerfile = dfName
			go func() { pw.CloseWithError(writeContext(pw, dir, file, dfName)) }()
			defer pr.Close()
			b.Context = pr
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			t0 := time.Now()
			ti, err := cl.BuildTemplate(cmd.Context(), b, func(ev apitype.TemplateBuildEvent) { printBuildEvent(stderr, ev) })
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ti)
			}
			state := "built"
			if ti.Cached {
				state = "unchanged (every step cached)"
			}
			fmt.Fprintf(stderr, "template %s %s in %s\n", ti.Name, state, time.Since(t0).Round(100*time.Millisecond))
			return printTemplates(cmd.OutOrStdout(), []apitype.TemplateInfo{ti})
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&b.Name, "tag", "t", "", "the template's NAME (required)")
	fs.StringVarP(&file, "file", "f", "", "the Dockerfile (default: CONTEXT/Dockerfile)")
	fs.StringArrayVar(&buildArgs, "build-arg", nil, "KEY=VALUE for an ARG of the Dockerfile (repeatable)")
	fs.StringVar(&b.Start, "start", "", "shell command started in the background before the template is saved")
	fs.StringVar(&b.Ready, "ready", "", "shell command retried until it succeeds before the template is saved")
	fs.IntVar(&b.CPUs, "cpus", 0, "CPUs of its sandboxes (default: the daemon's)")
	fs.IntVar(&b.MemoryMiB, "memory-mib", 0, "memory of its sandboxes, in MiB (default: the daemon's)")
	fs.IntVar(&b.DiskMiB, "disk-mib", 0, "disk space its sandboxes may write, in MiB (default: the daemon's)")
	fs.IntVar(&pool, "pool-size", -1, "sandboxes kept restored and ready to hand out (default: the daemon's)")
	addOutputFlags(fs, &asJSON, nil, "")
	addPolicyFlags(cmd, cfg, &pf, "egress of RUN steps, and of its sandboxes")
	return cmd
}

// parseBuildArgs reads --build-arg values: KEY=VALUE, or KEY for the
// value of KEY in the environment, as docker build takes it.
func parseBuildArgs(kvs []string) (map[string]string, error) {
	args := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v, ok = os.LookupEnv(k)
		}
		if !ok {
			return nil, usageErrorf("--build-arg %s: want KEY=VALUE", kv)
		}
		args[k] = v
	}
	return args, nil
}

// printBuildEvent shows one event of a build on w.
func printBuildEvent(w io.Writer, ev apitype.TemplateBuildEvent) {
	if s := ev.Step; s != nil {
		cached := ""
		if s.Cached {
			cached = " (cached)"
		}
		line := ""
		if s.Line > 0 {
			line = fmt.Sprintf(" line %d:", s.Line)
		}
		fmt.Fprintf(w, "step %d/%d%s %s%s\n", s.N, s.Total, line, s.Text, cached)
	}
	if ev.Output != "" {
		io.WriteString(w, ev.Output)
	}
}

// contextDockerfile is the Dockerfile's name in the context tar: its
// path in the context, or a reserved name for one outside it.
func contextDockerfile(dir, file string) (string, error) {
	if file == "" {
		return "Dockerfile", nil
	}
	if _, err := os.Stat(file); err != nil {
		return "", fmt.Errorf("the Dockerfile: %w", err)
	}
	absDir, err1 := filepath.Abs(dir)
	absFile, err2 := filepath.Abs(file)
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(absDir, absFile); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel), nil
	}
	return template.ReservedDir + "/Dockerfile", nil
}

// writeContext writes dir as a tar stream, leaving out what its
// .dockerignore excludes, with the Dockerfile (file) at dfName if it is
// outside dir.
func writeContext(w io.Writer, dir, file, dfName string) error {
	ignore, err := template.LoadIgnore(dir)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(ignore, rel) && rel != dfName && rel != ".dockerignore" {
			return nil // a directory still walks: a pattern may re-include what is under it
		}
		return addTarEntry(tw, p, rel)
	})
	if err != nil {
		return err
	}
	if strings.HasPrefix(dfName, template.ReservedDir+"/") {
		if err := addTarEntry(tw, file, dfName); err != nil {
			return err
		}
	}
	return tw.Close()
}

func ignored(m *patternmatcher.PatternMatcher, rel string) bool {
	return m != nil && template.Ignored(m, rel)
}

func addTarEntry(tw *tar.Writer, p, name string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil // a socket or device: not part of a context
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if fi.Mode().IsRegular() {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return err
		}
	}
	return nil
}

func newTemplateLsCmd(cfg *clientConfig) *cobra.Command {
	var asJSON, names bool
	cmd := &cobra.Command{
		Use:               "ls [flags]",
		Aliases:           []string{"list"},
		Short:             "List templates",
		Example:           "  cove template ls\n  cove template ls -q",
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			tis, err := cl.ListTemplates(cmd.Context())
			if err != nil {
				return explain(err, daemon)
			}
			name := func(ti apitype.TemplateInfo) string { return ti.Name }
			return printList(cmd.OutOrStdout(), asJSON, names, tis, name, printTemplates)
		},
	}
	addOutputFlags(cmd.Flags(), &asJSON, &names, "print only the names, one a line")
	return cmd
}

// printTemplates writes a table of templates.
func printTemplates(w io.Writer, tis []apitype.TemplateInfo) error {
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tBASE\tSTEPS\tSIZE\tBUILD\tDOCKERFILE\tCHILDREN\tAGE")
	for _, ti := range tis {
		digest := strings.TrimPrefix(ti.Digest, "sha256:")
		if len(digest) > 12 {
			digest = digest[:12]
		}
		children := 0
		if ti.Snapshot != nil {
			children = ti.Snapshot.Children
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", ti.Name, ti.Base, len(ti.Steps),
			humanize.IBytes(uint64(ti.SizeBytes)), (time.Duration(ti.BuildMs) * time.Millisecond).Round(100*time.Millisecond),
			digest, children, fmtDuration(now.Sub(time.Unix(ti.CreatedAtUnix, 0))))
	}
	return tw.Flush()
}

func newTemplateRmCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "rm NAME...",
		Short:             "Remove templates with their step caches",
		Long:              `Remove templates, their snapshots and step caches. One with sandboxes spawned from it alive stays.`,
		Example:           "  cove template rm web",
		Args:              nArgs(1, -1, "give template NAMEs"),
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, daemon, err := cfg.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := cl.DeleteTemplate(cmd.Context(), name); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, explain(err, daemon)))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), name)
			}
			return errors.Join(errs...)
		},
	}
	return cmd
}
