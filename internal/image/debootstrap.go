package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// debootstrapBase fills rootfs with Debian per r. debootstrap alone cannot
// install npm (it does not resolve virtual packages), so phase 1 makes a
// minbase system and phase 2 runs apt-get in a chroot.
func debootstrapBase(ctx context.Context, b *builder, r recipe, rootfs string, out *outputSink) error {
	if os.Geteuid() != 0 {
		return errors.New("building the base rootfs needs root (debootstrap, chroot, mount)")
	}
	deb, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap not found (run scripts/install-deps.sh): %w", err)
	}
	mirror := b.opts.Mirror
	if mirror == "" {
		if mirror, err = DetectMirror(r.Suite); err != nil {
			return err
		}
	}
	b.prog.printf("base: mirror %s", mirror)

	args := []string{"--variant=" + r.Variant}
	if len(r.Include) > 0 {
		args = append(args, "--include="+strings.Join(r.Include, ","))
	}
	args = append(args, r.Suite, rootfs, mirror)
	err = b.prog.step("base: debootstrap phase 1 (minbase)", out, func() error {
		return run(ctx, out, "", deb, args...)
	})
	if err != nil {
		return err
	}

	// Before phase 2, so that dpkg never unpacks what we would delete.
	if err := writeGuestFile(rootfs, dpkgCfgPath, r.DpkgCfg, 0o644); err != nil {
		return err
	}
	script := phase2Script(r.Packages)
	return b.prog.step("base: installing packages (apt-get in a chroot)", out, func() error {
		return withProc(rootfs, func() error {
			return run(ctx, out, rootfs, "/bin/sh", "-c", script)
		})
	})
}

// phase2Script runs inside the chroot. No /dev bind is needed: debootstrap
// created the device nodes apt and dpkg use, and Use-Pty=0 avoids ptys.
func phase2Script(pkgs []string) string {
	apt := "apt-get -q -o Dpkg::Use-Pty=0"
	return strings.Join([]string{
		"set -eu",
		// Nothing may try to start a service in the chroot.
		`printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d`,
		"chmod 0755 /usr/sbin/policy-rc.d",
		apt + " update",
		apt + " -y install --no-install-recommends " + strings.Join(pkgs, " "),
		apt + " clean",
		"rm -rf /var/lib/apt/lists/*",
		"rm -f /usr/sbin/policy-rc.d",
		// Phase 1 ran before the dpkg excludes: drop its docs too.
		"find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete",
		"find /usr/share/doc -mindepth 1 -type d -empty -delete",
		"rm -rf /usr/share/man/* /usr/share/info/* /usr/share/lintian/*",
		"find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +",
	}, "\n")
}

// withProc runs fn with proc mounted at rootfs/proc, and unmounts it
// whatever fn does. (A build killed outright is cleaned up by removeTree.)
func withProc(rootfs string, fn func() error) (err error) {
	target := filepath.Join(rootfs, "proc")
	if err := os.MkdirAll(target, 0o555); err != nil {
		return err
	}
	if err := syscall.Mount("proc", target, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc in %s: %w", rootfs, err)
	}
	defer func() {
		if uerr := syscall.Unmount(target, 0); uerr != nil {
			// A straggler holds it: detach, the kernel finishes later.
			if uerr := syscall.Unmount(target, syscall.MNT_DETACH); uerr != nil {
				err = errors.Join(err, fmt.Errorf("unmount %s: %w", target, uerr))
			}
		}
	}()
	return fn()
}

// run runs a command (chrooted into root unless it is "") with its output
// going to out. Cancelling ctx kills the command's whole process group:
// debootstrap and apt leave dpkg, gpgv and friends behind otherwise.
func run(ctx context.Context, out *outputSink, root, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = buildEnv()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, // see Cancel
		Chroot:  root,
		// If cove itself is killed, stop the build rather than let it
		// write into a directory the next build will delete.
		Pdeathsig: syscall.SIGKILL,
	}
	if root != "" {
		cmd.Dir = "/"
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // grandchildren may hold the pipes
	fmt.Fprintf(out.log, "+ %s %s\n", name, strings.Join(args, " "))
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", filepath.Base(name), context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("%s: %w; last output:\n%s", filepath.Base(name), err, indent(out.lastLines()))
	}
	return nil
}

// buildEnv is a clean environment for debootstrap and the chroot: the
// caller's locale or PATH must not leak into the image build.
func buildEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LC_ALL=C",
		"DEBIAN_FRONTEND=noninteractive",
		"DEBCONF_NONINTERACTIVE_SEEN=true",
	}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func indent(s string) string {
	if s == "" {
		return "    (none)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// finishBase writes the recipe's files and mountpoints into rootfs. It
// runs for every base, however it was populated.
func finishBase(r recipe, rootfs string) error {
	for p, content := range r.Files {
		if err := writeGuestFile(rootfs, p, content, 0o644); err != nil {
			return err
		}
	}
	for _, d := range r.Dirs {
		if err := makeGuestDir(rootfs, d.Path, d.Mode); err != nil {
			return err
		}
	}
	return nil
}

// writeGuestFile replaces rootfs/p with a new file. It removes whatever is
// there first and never follows a symlink: the guest's absolute symlinks
// point into the host (debootstrap may leave /etc/resolv.conf as one).
func writeGuestFile(rootfs, p, content string, perm fs.FileMode) error {
	path := filepath.Join(rootfs, p)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil { // umask
		f.Close()
		return err
	}
	return f.Close()
}

// makeGuestDir makes rootfs/p a directory with mode. A symlink in its
// place is replaced, not followed (its target would be on the host).
func makeGuestDir(rootfs, p string, mode fs.FileMode) error {
	path := filepath.Join(rootfs, p)
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.IsDir():
	case err == nil:
		if err := os.Remove(path); err != nil {
			return err
		}
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(path, 0o755); err != nil {
			return err
		}
	default:
		return err
	}
	return os.Chmod(path, mode)
}
