package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/image"
)

const imageUsageText = `usage: cove image build [--dir D] [--name N] [--agent PATH] [--mirror URL] [--vm] [-v]
       cove image ls [--dir D] [--json]
       cove image rm [--dir D] ID...
`

// runImage builds, lists and removes guest images.
func runImage(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, imageUsageText)
		return flag.ErrHelp
	}
	switch args[0] {
	case "build":
		return runImageBuild(ctx, args[1:])
	case "ls", "list":
		return runImageLs(ctx, args[1:])
	case "rm":
		return runImageRm(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(os.Stderr, imageUsageText)
		return flag.ErrHelp
	}
	fmt.Fprintf(os.Stderr, "cove image: unknown subcommand %q\n%s", args[0], imageUsageText)
	return exitError{2}
}

// imageFlags makes a flag set whose parse errors are reported once, by
// the flag package, with exit status 2.
func imageFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("cove image "+name, flag.ContinueOnError)
}

func parseImageFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError{2} // flag has printed the error and usage
	}
	return nil
}

func runImageBuild(ctx context.Context, args []string) error {
	fs := imageFlags("build")
	dir := fs.String("dir", image.DefaultDir, "image store `directory`")
	name := fs.String("name", image.DefaultName, "image `name`")
	agent := fs.String("agent", "", "cove-agent binary (default: cove-agent next to the cove executable)")
	mirror := fs.String("mirror", "", "Debian mirror `URL` (default: the host's apt source)")
	verbose := fs.Bool("v", false, "show debootstrap and apt output")
	vm := fs.Bool("vm", false, "also build the QEMU microVM artifacts (kernel, initrd, ext4 disk)")
	if err := parseImageFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *agent == "" {
		p, err := imageDefaultAgent()
		if err != nil {
			return err
		}
		*agent = p
	}
	img, err := image.Build(ctx, image.BuildOptions{
		Dir:       *dir,
		Name:      *name,
		AgentPath: *agent,
		Mirror:    *mirror,
		Progress:  os.Stderr,
		Verbose:   *verbose,
		VM:        *vm,
	})
	if err != nil {
		return err
	}
	fmt.Println(img.ID) // progress went to stderr: stdout is just the id
	return nil
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

func runImageLs(ctx context.Context, args []string) error {
	fs := imageFlags("ls")
	dir := fs.String("dir", image.DefaultDir, "image store `directory`")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseImageFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	imgs, err := image.List(*dir)
	if err != nil {
		return err
	}
	if *asJSON {
		if imgs == nil {
			imgs = []image.Image{} // [] rather than null
		}
		return printJSON(os.Stdout, imgs)
	}
	tw := newTable(os.Stdout)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED\tSIZE\tCURRENT")
	for _, img := range imgs {
		cur := ""
		if img.Current {
			cur = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.ID, img.Name,
			img.Manifest.Created.Local().Format("2006-01-02 15:04:05"),
			fmtBytes(img.Manifest.SizeBytes), cur)
	}
	return tw.Flush()
}

func runImageRm(ctx context.Context, args []string) error {
	fs := imageFlags("rm")
	dir := fs.String("dir", image.DefaultDir, "image store `directory`")
	if err := parseImageFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("no image id given")
	}
	var errs []error
	for _, id := range fs.Args() {
		if err := image.Remove(ctx, *dir, id); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Println(id)
	}
	return errors.Join(errs...)
}
