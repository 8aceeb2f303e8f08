package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/pkg/apitype"
	"github.com/cove-sandbox/cove/pkg/client"
)

// newFSCmd is `cove fs`, the file system calls on paths in a sandbox.
func newFSCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Describe, make, move and remove files in a sandbox",
		Long: `Work on paths in a sandbox: stat, mkdir (with parents), mv and rm.
Relative paths are under /work. A symlink is described, moved and removed
as itself, never followed. cp copies files in and out.`,
		Example: `  cove fs mkdir $ID src/pkg
  cove fs mv $ID notes.txt docs/notes.txt
  cove fs stat $ID docs
  cove fs rm -r $ID build`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(newFSStatCmd(cfg), newFSMkdirCmd(cfg), newFSMvCmd(cfg), newFSRmCmd(cfg))
	return cmd
}

// fsVerb is what every fs subcommand shares: its flags and the client of
// its sandbox.
type fsVerb struct {
	cfg          *clientConfig
	sandboxToken string
	asJSON       bool
}

func (v *fsVerb) flags(cmd *cobra.Command) {
	addSandboxTokenFlag(cmd.Flags(), &v.sandboxToken)
	addOutputFlags(cmd.Flags(), &v.asJSON, nil, "")
	cmd.ValidArgsFunction = completeFirst(v.cfg.sandboxIDs)
}

// each runs call on every path, stopping at the first error, and prints
// what the calls answered, if anything, as JSON or as a table.
func (v *fsVerb) each(cmd *cobra.Command, id string, paths []string, call func(ctx context.Context, cl *client.Client, tok, p string) (*apitype.FileInfo, error)) error {
	cl, daemon, tok, err := v.cfg.sandboxClient(v.sandboxToken, id)
	if err != nil {
		return err
	}
	var infos []apitype.FileInfo
	for _, p := range paths {
		fi, err := call(cmd.Context(), cl, tok, p)
		if err != nil {
			return explain(notFoundIn(cmd.Context(), cl, err, id), daemon)
		}
		if fi != nil {
			infos = append(infos, *fi)
		}
	}
	if v.asJSON {
		if infos == nil {
			infos = []apitype.FileInfo{}
		}
		return printJSON(cmd.OutOrStdout(), infos)
	}
	if len(infos) == 0 {
		return nil
	}
	return printFileInfos(cmd.OutOrStdout(), infos)
}

// printFileInfos prints files as a table.
func printFileInfos(w io.Writer, infos []apitype.FileInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PATH\tTYPE\tSIZE\tMODE\tMODIFIED")
	for _, fi := range infos {
		p := fi.Path
		if fi.Target != "" {
			p += " -> " + fi.Target
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p, fi.Type, humanize.IBytes(uint64(max(fi.Size, 0))), fi.Mode,
			time.Unix(fi.MtimeUnix, 0).Format(time.DateTime))
	}
	return tw.Flush()
}

func newFSStatCmd(cfg *clientConfig) *cobra.Command {
	v := &fsVerb{cfg: cfg}
	cmd := &cobra.Command{
		Use:   "stat [flags] ID PATH...",
		Short: "Describe paths in a sandbox",
		Example: `  cove fs stat $ID main.py /etc/os-release
  cove fs stat --json $ID out`,
		Args: nArgs(2, -1, "need a sandbox ID and at least one PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return v.each(cmd, args[0], args[1:], func(ctx context.Context, cl *client.Client, tok, p string) (*apitype.FileInfo, error) {
				fi, err := cl.Stat(ctx, args[0], tok, p)
				return &fi, err
			})
		},
	}
	v.flags(cmd)
	return cmd
}

func newFSMkdirCmd(cfg *clientConfig) *cobra.Command {
	v := &fsVerb{cfg: cfg}
	var mode string
	cmd := &cobra.Command{
		Use:   "mkdir [flags] ID PATH...",
		Short: "Make directories in a sandbox, with their parents",
		Long:  "Make directories in a sandbox with any missing parents, like mkdir -p: one that exists already is fine.",
		Example: `  cove fs mkdir $ID src/pkg tests
  cove fs mkdir -m 0700 $ID /root/.ssh`,
		Args: nArgs(2, -1, "need a sandbox ID and at least one PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			perm, err := apitype.ParseMode(mode)
			if err != nil {
				return usageErrorf("--%v", err)
			}
			return v.each(cmd, args[0], args[1:], func(ctx context.Context, cl *client.Client, tok, p string) (*apitype.FileInfo, error) {
				fi, err := cl.MakeDir(ctx, args[0], tok, p, fs.FileMode(perm))
				return &fi, err
			})
		},
	}
	cmd.Flags().StringVarP(&mode, "mode", "m", "", "octal permission bits of the new directories (default 0755)")
	v.flags(cmd)
	return cmd
}

func newFSMvCmd(cfg *clientConfig) *cobra.Command {
	v := &fsVerb{cfg: cfg}
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "mv [flags] ID FROM TO",
		Short: "Move or rename a file or directory in a sandbox",
		Long: `Move or rename a file or directory in a sandbox. An existing TO is refused
unless --overwrite (-f), which replaces a file or an empty directory. TO's
parent must exist.`,
		Example: `  cove fs mv $ID draft.md docs/final.md
  cove fs mv -f $ID build.new build`,
		Args: nArgs(3, 3, "need a sandbox ID, FROM and TO"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return v.each(cmd, args[0], args[1:2], func(ctx context.Context, cl *client.Client, tok, from string) (*apitype.FileInfo, error) {
				fi, err := cl.Move(ctx, args[0], tok, from, args[2], overwrite)
				return &fi, err
			})
		},
	}
	cmd.Flags().BoolVarP(&overwrite, "overwrite", "f", false, "replace an existing TO")
	v.flags(cmd)
	return cmd
}

func newFSRmCmd(cfg *clientConfig) *cobra.Command {
	v := &fsVerb{cfg: cfg}
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm [flags] ID PATH...",
		Short: "Remove files or directories in a sandbox",
		Long: `Remove files, symlinks (not what they point to) and empty directories in a
sandbox; a directory with entries only with -r, which removes everything
under it. Prints nothing on success.`,
		Example: `  cove fs rm $ID old.log
  cove fs rm -r $ID build node_modules`,
		Args: nArgs(2, -1, "need a sandbox ID and at least one PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return v.each(cmd, args[0], args[1:], func(ctx context.Context, cl *client.Client, tok, p string) (*apitype.FileInfo, error) {
				return nil, cl.Remove(ctx, args[0], tok, p, recursive)
			})
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and everything in them")
	v.flags(cmd)
	return cmd
}
