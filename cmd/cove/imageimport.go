package main

// cove image import / pull: images from OCI, through the daemon (which
// adds its agent and, on QEMU, the VM artifacts), or straight into an
// image store with --dir.

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/image"
	"github.com/cove-sandbox/cove/pkg/apitype"
)

// importFlags are the flags import and pull share.
type importFlags struct {
	name, dir, agent string
	vm, asJSON       bool
}

func (f *importFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.name, "name", "", "image `name` (required)")
	fs.StringVar(&f.dir, "dir", "", "import straight into this image store `directory` instead of through the daemon")
	fs.StringVar(&f.agent, "agent", "", "with --dir: cove-agent binary (default: cove-agent next to the cove executable)")
	fs.BoolVar(&f.vm, "vm", false, "with --dir: also make the QEMU microVM artifacts")
	addOutputFlags(fs, &f.asJSON, nil, "")
	cmd.MarkFlagRequired("name")
}

func newImageImportCmd(cfg *clientConfig) *cobra.Command {
	var f importFlags
	cmd := &cobra.Command{
		Use:   "import FILE --name NAME",
		Short: "Import an OCI image layout or a docker save archive as an image",
		Long: `Import an OCI image (an OCI image layout directory or tar, or a
` + "`docker save`" + ` archive) as image NAME: its layers are unpacked with their
whiteouts, owners, modes and xattrs, and cove-agent is added. The archive is
uploaded to the daemon, which makes the image for its backend. Progress goes
to stderr.`,
		Example: `  docker save python:3.12-slim -o py.tar && cove image import py.tar --name py
  cove spawn --image py`,
		Args: nArgs(1, 1, "no archive given"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.dir != "" {
				return f.local(cmd, image.ImportOptions{Archive: args[0]})
			}
			fi, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return fmt.Errorf("%s is a directory: the daemon takes an archive (tar the OCI layout, or use --dir)", args[0])
			}
			file, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer file.Close()
			return f.remote(cmd, cfg, func(ctx context.Context, c importer, progress io.Writer) (apitype.ImageInfo, error) {
				return c.ImportImage(ctx, f.name, file, progress)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func newImagePullCmd(cfg *clientConfig) *cobra.Command {
	var f importFlags
	cmd := &cobra.Command{
		Use:   "pull REF --name NAME",
		Short: "Pull an image from a registry as an image",
		Long: `Have the daemon pull REF (e.g. docker.io/library/alpine:3.20) from its
registry, for linux/amd64, and import it as image NAME, as cove image import
does. The daemon's host must reach the registry; its docker credentials
(~/.docker/config.json) are used if it has any.`,
		Example: "  cove image pull docker.io/library/python:3.12-slim --name py",
		Args:    nArgs(1, 1, "no image reference given"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.dir != "" {
				return f.local(cmd, image.ImportOptions{Ref: args[0]})
			}
			return f.remote(cmd, cfg, func(ctx context.Context, c importer, progress io.Writer) (apitype.ImageInfo, error) {
				return c.PullImage(ctx, f.name, args[0], progress)
			})
		},
	}
	f.add(cmd)
	return cmd
}

// importer is what import and pull call on the client.
type importer interface {
	ImportImage(ctx context.Context, name string, archive io.Reader, progress io.Writer) (apitype.ImageInfo, error)
	PullImage(ctx context.Context, name, ref string, progress io.Writer) (apitype.ImageInfo, error)
}

func (f *importFlags) remote(cmd *cobra.Command, cfg *clientConfig, call func(context.Context, importer, io.Writer) (apitype.ImageInfo, error)) error {
	cl, daemon, err := cfg.client()
	if err != nil {
		return err
	}
	info, err := call(cmd.Context(), cl, cmd.ErrOrStderr())
	if err != nil {
		return explain(err, daemon)
	}
	if f.asJSON {
		return printJSON(cmd.OutOrStdout(), info)
	}
	return printImageInfos(cmd.OutOrStdout(), []apitype.ImageInfo{info})
}

// local imports into f.dir on this host.
func (f *importFlags) local(cmd *cobra.Command, o image.ImportOptions) error {
	if f.agent == "" {
		p, err := imageDefaultAgent()
		if err != nil {
			return err
		}
		f.agent = p
	}
	o.Name, o.Agent, o.VM, o.Progress = f.name, f.agent, f.vm, cmd.ErrOrStderr()
	img, err := image.Import(cmd.Context(), f.dir, o)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(cmd.OutOrStdout(), img)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), img.ID)
	return err
}

// printImageInfos writes the daemon's images as a table.
func printImageInfos(w io.Writer, imgs []apitype.ImageInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tVM\tSOURCE")
	for _, img := range imgs {
		vm := ""
		if img.VM {
			vm = "yes"
		}
		src := img.Source
		if src == "" {
			src = "cove image build"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.ID, img.Name, humanize.IBytes(uint64(img.SizeBytes)), vm, src)
	}
	return tw.Flush()
}
