package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/internal/runtime"
	"github.com/cove-sandbox/cove/internal/runtime/qemu"
)

func newImageCmd(cfg *clientConfig) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, list and remove guest images",
		Long: `Guest images are the root filesystems sandboxes boot from, kept in an
image store directory on the daemon's host (` + image.DefaultDir + `).`,
		Example: `  cove image build --agent bin/cove-agent
  cove image import image.tar --name mine
  cove image ls`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(newImageBuildCmd(), newImageLsCmd(), newImageRmCmd(),
		newImageImportCmd(cfg), newImagePullCmd(cfg))
	return cmd
}

// addDirFlag adds --dir, the image store.
func addDirFlag(fs *pflag.FlagSet, dir *string) {
	fs.StringVar(dir, "dir", image.DefaultDir, "image store `directory`")
}

func newImageBuildCmd() *cobra.Command {
	o := image.BuildOptions{}
	cmd := &cobra.Command{
		Use:   "build [flags]",
		Short: "Build the guest image; prints its id",
		Long: `Build the guest image (Debian with python3, node, git, ..., and cove-agent)
with debootstrap. The image is content-addressed: an unchanged agent and
recipe is a no-op. Progress goes to stderr, the image's id to stdout.`,
		Example: `  cove image build --agent bin/cove-agent
  cove image build --vm --dir /var/lib/cove/images`,
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.AgentPath == "" {
				p, err := imageDefaultAgent()
				if err != nil {
					return err
				}
				o.AgentPath = p
			}
			o.Progress = cmd.ErrOrStderr()
			if o.VM {
				o.VMSmoke = smokeBootVM
			}
			img, err := image.Build(cmd.Context(), o)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), img.ID) // stdout is just the id
			return err
		},
	}
	fs := cmd.Flags()
	addDirFlag(fs, &o.Dir)
	fs.StringVar(&o.Name, "name", image.DefaultName, "image `name`")
	fs.StringVar(&o.AgentPath, "agent", "", "cove-agent binary (default: cove-agent next to the cove executable)")
	fs.StringVar(&o.Mirror, "mirror", "", "Debian mirror `URL` (default: the host's apt source)")
	fs.BoolVarP(&o.Verbose, "verbose", "v", false, "show debootstrap and apt output")
	fs.BoolVar(&o.VM, "vm", false, "also build the QEMU microVM artifacts (kernel, initrd, ext4 disk)")
	return cmd
}

// smokeBootVM boots new VM artifacts as the QEMU backend would, before
// the build publishes them.
func smokeBootVM(ctx context.Context, vf image.VMFiles) error {
	return qemu.SmokeBoot(ctx, qemu.Config{}, runtime.ImageFiles{Rootfs: filepath.Join(filepath.Dir(vf.Dir), "rootfs"),
		Kernel: vf.Kernel, Initrd: vf.Initrd, Disk: vf.Disk})
}

// imageDefaultAgent finds cove-agent beside the running cove, where
// `make build` puts both.
func imageDefaultAgent() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate cove-agent: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	p := filepath.Join(filepath.Dir(exe), "cove-agent")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("no cove-agent next to %s: build it with `make build`, or pass --agent PATH", exe)
	}
	return p, nil
}

func newImageLsCmd() *cobra.Command {
	var (
		dir    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:               "ls [flags]",
		Aliases:           []string{"list"},
		Short:             "List the images in the store; * marks the current one of each name",
		Example:           "  cove image ls\n  cove image ls --json",
		Args:              noArgs,
		ValidArgsFunction: completeNothing,
		RunE: func(cmd *cobra.Command, _ []string) error {
			imgs, err := image.List(dir)
			if err != nil {
				return err
			}
			return printList(cmd.OutOrStdout(), asJSON, false, imgs, nil, printImages)
		},
	}
	addDirFlag(cmd.Flags(), &dir)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	return cmd
}

// printImages writes image ls's table.
func printImages(w io.Writer, imgs []image.Image) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED\tSIZE\tCURRENT\tSOURCE")
	for _, img := range imgs {
		cur := ""
		if img.Current {
			cur = "*"
		}
		src := img.Manifest.Source // imported from OCI
		if src == "" {
			src = "cove image build"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", img.ID, img.Name,
			img.Manifest.Created.Local().Format("2006-01-02 15:04:05"),
			humanize.IBytes(uint64(img.Manifest.SizeBytes)), cur, src)
	}
	return tw.Flush()
}

func newImageRmCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:     "rm [flags] ID...",
		Short:   "Remove images from the store; prints the ids removed",
		Example: "  cove image rm 3f2a9c",
		Args:    nArgs(1, -1, "no image id given"),
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			imgs, _ := image.List(dir)
			var ids []cobra.Completion
			for _, img := range imgs {
				if !slices.Contains(args, img.ID) {
					ids = append(ids, cobra.CompletionWithDesc(img.ID, img.Name))
				}
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, ids []string) error {
			var errs []error
			for _, id := range ids {
				if err := image.Remove(cmd.Context(), dir, id); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return errors.Join(errs...)
		},
	}
	addDirFlag(cmd.Flags(), &dir)
	return cmd
}
