package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cove-sandbox/cove/internal/fsutil"
	"github.com/cove-sandbox/cove/pkg/client"
)

// progressMin is the size from which cp draws progress on a terminal.
const progressMin = 8 << 20

// cpArgs is a parsed `cove cp SRC DST`.
type cpArgs struct {
	upload bool   // local to sandbox; else sandbox to local
	id     string // the sandbox
	remote string // path in the sandbox; relative ones are under /work
	local  string // local path, or "-" for stdin or stdout
}

// parseCp parses SRC and DST, exactly one of which is ID:PATH.
func parseCp(src, dst string) (cpArgs, error) {
	sid, spath, sremote := splitRemote(src)
	did, dpath, dremote := splitRemote(dst)
	switch {
	case sremote && dremote:
		return cpArgs{}, errors.New("both SRC and DST are ID:PATH; copying between sandboxes is not supported, go through a local file")
	case !sremote && !dremote:
		return cpArgs{}, errors.New("one of SRC and DST must be ID:PATH (write a local path that has a colon as ./NAME)")
	case sremote:
		if spath == "" || strings.HasSuffix(spath, "/") {
			return cpArgs{}, fmt.Errorf("%s names a directory: copy it with cove cp -r", src)
		}
		local := dst
		if local != "-" && isDirPath(local) {
			local = filepath.Join(local, path.Base(spath))
		}
		return cpArgs{id: sid, remote: spath, local: local}, nil
	default:
		remote := dpath
		if remote == "" || strings.HasSuffix(remote, "/") {
			if src == "-" {
				return cpArgs{}, fmt.Errorf("name the file to write from stdin: %s:PATH", did)
			}
			remote += filepath.Base(src)
		}
		return cpArgs{upload: true, id: did, remote: remote, local: src}, nil
	}
}

// splitRemote splits ID:PATH. Paths that start with / or ., "-", and
// anything whose part before the colon has a slash are local.
func splitRemote(s string) (id, p string, ok bool) {
	if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return "", "", false
	}
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.ContainsAny(id, `/\`) {
		return "", "", false
	}
	return id, p, true
}

// isDirPath reports whether a local destination names a directory.
func isDirPath(p string) bool {
	if strings.HasSuffix(p, string(filepath.Separator)) {
		return true
	}
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// cpResult is the --json summary of a copy.
type cpResult struct {
	Direction string  `json:"direction"` // upload or download
	Sandbox   string  `json:"sandbox"`
	Path      string  `json:"path"` // in the sandbox
	Local     string  `json:"local"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	MBPerSec  float64 `json:"mb_per_sec"`
	// Of a directory (-r): the files and directories written, and the
	// entries skipped (device nodes, FIFOs, sockets).
	Files   int64 `json:"files,omitempty"`
	Dirs    int64 `json:"dirs,omitempty"`
	Skipped int64 `json:"skipped,omitempty"`
}

func newCpCmd(cfg *clientConfig) *cobra.Command {
	var (
		sandboxToken string
		asJSON       bool
		recursive    bool
	)
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy a file or a directory into or out of a sandbox",
		Long: `Copy one file between here and a sandbox. One of SRC and DST is ID:PATH,
a path in sandbox ID (relative to /work); the other is a local path, or -
for standard input or output. A DST that is a directory keeps the name.

With -r, SRC is a directory whose content is copied into the directory DST,
made if missing, as a tar stream made and extracted on the fly: symlinks stay
symlinks, modes and times are kept, and no entry lands outside DST.`,
		Example: `  cove cp ./data.csv $ID:/work/
  cove cp $ID:/work/out.json .
  tar c src | cove cp - $ID:src.tar
  cove cp -r ./repo $ID:repo
  cove cp -r $ID:repo ./repo-back`,
		Args:              nArgs(2, 2, "need SRC and DST, one of them ID:PATH"),
		ValidArgsFunction: cfg.completeCp,
		RunE: func(cmd *cobra.Command, args []string) error {
			parse := parseCp
			if recursive {
				parse = parseCpDir
			}
			a, err := parse(args[0], args[1])
			if err != nil {
				return usageError{err}
			}
			if asJSON && !a.upload && a.local == "-" {
				return usageErrorf("--json can't share stdout with the file; write the file somewhere else")
			}
			cl, daemon, tok, err := cfg.sandboxClient(sandboxToken, a.id)
			if err != nil {
				return err
			}
			var res cpResult
			switch {
			case recursive && a.upload:
				res, err = uploadDir(cmd.Context(), cl, tok, a, cmd.ErrOrStderr())
			case recursive:
				res, err = downloadDir(cmd.Context(), cl, tok, a, cmd.ErrOrStderr())
			case a.upload:
				res, err = upload(cmd.Context(), cl, tok, a, cmd.InOrStdin(), cmd.ErrOrStderr())
			default:
				res, err = download(cmd.Context(), cl, tok, a, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err != nil {
				return explain(err, daemon)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			printCpSummary(cmd.ErrOrStderr(), res, recursive)
			return nil
		},
	}
	addSandboxTokenFlag(cmd.Flags(), &sandboxToken)
	addOutputFlags(cmd.Flags(), &asJSON, nil, "")
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy a directory's content into a directory, as a tar stream")
	return cmd
}

// printCpSummary says what a copy moved, how fast.
func printCpSummary(w io.Writer, res cpResult, recursive bool) {
	verb, from, to := "uploaded", res.Local, res.Sandbox+":"+res.Path
	if res.Direction == "download" {
		verb, from, to = "downloaded", to, from
	}
	if from == "-" {
		from = "stdin"
	}
	if to == "-" {
		to = "stdout"
	}
	size := fmt.Sprintf("%d bytes", res.Bytes)
	if res.Bytes >= 1024 {
		size = fmt.Sprintf("%s (%d bytes)", humanize.IBytes(uint64(res.Bytes)), res.Bytes)
	}
	if recursive {
		size = fmt.Sprintf("%d files, %d directories, %s", res.Files, res.Dirs, size)
		if res.Skipped > 0 {
			size += fmt.Sprintf(" (%d device nodes, FIFOs or sockets skipped)", res.Skipped)
		}
	}
	fmt.Fprintf(w, "%s %s from %s to %s in %.2fs, %.1f MB/s\n",
		verb, size, from, to, res.Seconds, res.MBPerSec)
}

// upload copies a.local (stdin if "-") into the sandbox, drawing progress
// on stderr.
func upload(ctx context.Context, cl *client.Client, tok string, a cpArgs, stdin io.Reader, stderr io.Writer) (cpResult, error) {
	var (
		r    = stdin
		size = int64(-1)
		mode = fs.FileMode(0o644)
	)
	if a.local == "-" {
		// Stdin redirected from a file has a known size.
		if f, ok := stdin.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				if off, err := f.Seek(0, io.SeekCurrent); err == nil {
					size = fi.Size() - off
				}
			}
		}
	} else {
		f, err := os.Open(a.local)
		if err != nil {
			return cpResult{}, err
		}
		defer f.Close()
		r = f
		fi, err := f.Stat()
		if err != nil {
			return cpResult{}, err
		}
		if fi.IsDir() {
			return cpResult{}, fmt.Errorf("%s is a directory: copy it with cove cp -r", a.local)
		}
		if fi.Mode().IsRegular() {
			size = fi.Size()
		}
		mode = fi.Mode().Perm()
	}
	m := newMeter(size)
	stop := m.draw(ctx, stderr)
	fi, err := cl.PutFile(ctx, a.id, tok, a.remote, mode, m.reader(r), size)
	stop()
	if err != nil {
		return cpResult{}, notFoundIn(ctx, cl, err, a.id)
	}
	n := m.n.Load()
	if fi.Size != n {
		return cpResult{}, fmt.Errorf("sent %d bytes but the sandbox has %d in %s", n, fi.Size, fi.Path)
	}
	p := a.remote
	if fi.Path != "" {
		p = fi.Path // as the daemon resolved it
	}
	return m.result("upload", a.id, p, a.local), nil
}

// download copies the sandbox's file to a.local (stdout if "-"), drawing
// progress on stderr.
func download(ctx context.Context, cl *client.Client, tok string, a cpArgs, stdout, stderr io.Writer) (cpResult, error) {
	body, fi, err := cl.GetFile(ctx, a.id, tok, a.remote)
	if err != nil {
		return cpResult{}, notFoundIn(ctx, cl, err, a.id)
	}
	defer body.Close()
	m := newMeter(fi.Size)
	stop := m.draw(ctx, stderr)
	defer stop()
	if a.local == "-" {
		if _, err := copyBuffer(stdout, m.reader(body)); err != nil {
			return cpResult{}, fmt.Errorf("download %s:%s: %w", a.id, a.remote, err)
		}
	} else {
		mode := fs.FileMode(0o644)
		if v, err := strconv.ParseUint(fi.Mode, 8, 32); err == nil {
			mode = fs.FileMode(v).Perm()
		}
		if _, err := fsutil.WriteFrom(a.local, mode, m.reader(body)); err != nil {
			return cpResult{}, fmt.Errorf("download %s:%s: %w", a.id, a.remote, err)
		}
	}
	stop()
	// fi.Size is the file's size when the daemon opened it: a procfs file
	// says 0, and one being written may have grown. The body is the file
	// to its end; a daemon that could not finish cuts it, an error above.
	return m.result("download", a.id, a.remote, a.local), nil
}

// copyBuffer copies with a 1 MiB buffer; large transfers make fewer
// syscalls than with io.Copy's 32 KiB. Hiding dst's and src's other
// methods keeps io.CopyBuffer from bypassing the buffer.
func copyBuffer(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 1<<20))
}

// meter counts the bytes of a transfer and draws its progress.
type meter struct {
	total int64 // -1 if unknown
	start time.Time
	n     atomic.Int64
}

func newMeter(total int64) *meter {
	return &meter{total: total, start: time.Now()}
}

// reader returns r counting into m.
func (m *meter) reader(r io.Reader) io.Reader { return &countingReader{r: r, n: &m.n} }

// draw redraws a progress line on w every so often until stop is called,
// which erases it. It draws only if w is a terminal and the transfer is
// (or, of unknown size, grows) over progressMin.
func (m *meter) draw(ctx context.Context, w io.Writer) (stop func()) {
	if !isTerminal(w) || (m.total >= 0 && m.total <= progressMin) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		drawn := false
		for {
			select {
			case <-t.C:
				n := m.n.Load()
				if n <= progressMin && m.total < 0 {
					continue
				}
				line := fmt.Sprintf("%s  %.1f MB/s", humanize.IBytes(uint64(n)), mbPerSec(n, time.Since(m.start)))
				if m.total > 0 && n <= m.total { // a file may grow while read
					line = fmt.Sprintf("%s / %s (%d%%)  %.1f MB/s", humanize.IBytes(uint64(n)), humanize.IBytes(uint64(m.total)),
						n*100/m.total, mbPerSec(n, time.Since(m.start)))
				}
				fmt.Fprintf(w, "\r\x1b[K%s", line)
				drawn = true
			case <-done:
				if drawn {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	var stopped atomic.Bool
	return func() {
		if stopped.CompareAndSwap(false, true) {
			close(done)
			<-finished
		}
	}
}

// result summarizes the transfer so far.
func (m *meter) result(dir, id, remote, local string) cpResult {
	n, d := m.n.Load(), time.Since(m.start)
	return cpResult{
		Direction: dir,
		Sandbox:   id,
		Path:      remote,
		Local:     local,
		Bytes:     n,
		Seconds:   d.Seconds(),
		MBPerSec:  mbPerSec(n, d),
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
