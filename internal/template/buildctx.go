package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// Context is a build context: a tar stream kept in a temporary file, with
// an index of its entries. Nothing of it is ever written to the host's
// tree: COPY streams the entries it selects into the sandbox.
type Context struct {
	f          *os.File
	dockerfile []byte            // the entry ReadContext was told is the Dockerfile
	entries    map[string]*entry // by clean relative name
	names      []string          // sorted
}

type entry struct {
	hdr    tar.Header
	offset int64 // of its content in f
	sum    string
}

// MaxContext bounds a build context.
const MaxContext = 4 << 30

// ReservedDir holds what a client sends beside the context (a Dockerfile
// from outside it): not part of the context.
const ReservedDir = ".cove-build"

// ReadContext spools a tar stream (nil: an empty context) into a
// temporary file under dir and indexes it, leaving out what its
// .dockerignore excludes; dockerfile ("": none) names the entry that is
// the Dockerfile, read whatever .dockerignore says. The caller closes it.
func ReadContext(r io.Reader, dir, dockerfile string) (*Context, error) {
	f, err := os.CreateTemp(dir, ".cove-context-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // unlinked: nothing stays behind, also after a crash
	c := &Context{f: f, entries: map[string]*entry{}}
	if r != nil {
		n, err := io.Copy(f, io.LimitReader(r, MaxContext+1))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read the build context: %w", err)
		}
		if n > MaxContext {
			f.Close()
			return nil, fmt.Errorf("%w: the build context is over %d bytes", ErrInvalid, int64(MaxContext))
		}
	}
	if err := c.index(); err != nil {
		f.Close()
		return nil, err
	}
	if dockerfile != "" {
		if err := c.readDockerfile(dockerfile); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := c.applyIgnore(); err != nil {
		f.Close()
		return nil, err
	}
	for n := range c.entries {
		if n == ReservedDir || strings.HasPrefix(n, ReservedDir+"/") {
			delete(c.entries, n)
			continue
		}
		c.names = append(c.names, n)
	}
	slices.Sort(c.names)
	return c, nil
}

// Close removes the spooled context.
func (c *Context) Close() error { return c.f.Close() }

// offsetReader counts what tar has read, to find each entry's content.
type offsetReader struct {
	r   io.Reader
	off int64
}

func (o *offsetReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	o.off += int64(n)
	return n, err
}

func (c *Context) index() error {
	if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	or := &offsetReader{r: c.f}
	tr := tar.NewReader(or)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if or.off == 0 {
				break // an empty body is an empty context
			}
			return fmt.Errorf("%w: the build context is not a tar stream: %v", ErrInvalid, err)
		}
		name, err := contextPath(hdr.Name)
		if err != nil || name == "" || name == "." {
			if err != nil {
				return fmt.Errorf("%w: build context entry %q is outside the context", ErrInvalid, hdr.Name)
			}
			continue
		}
		e := &entry{hdr: *hdr, offset: or.off}
		e.hdr.Name = name
		if hdr.Typeflag == tar.TypeReg {
			h := sha256.New()
			if _, err := io.Copy(h, tr); err != nil {
				return fmt.Errorf("%w: build context entry %s: %v", ErrInvalid, name, err)
			}
			e.sum = hex.EncodeToString(h.Sum(nil))
		}
		c.entries[name] = e
	}
	return nil
}

// readDockerfile reads the Dockerfile from the context.
func (c *Context) readDockerfile(name string) error {
	clean, err := contextPath(name)
	if err != nil {
		return fmt.Errorf("%w: dockerfile %s: %v", ErrInvalid, name, err)
	}
	e := c.entries[clean]
	if e == nil || e.hdr.Typeflag != tar.TypeReg {
		return fmt.Errorf("%w: the build context has no Dockerfile at %s", ErrInvalid, name)
	}
	if e.hdr.Size > maxDockerfile {
		return fmt.Errorf("%w: the Dockerfile is over %d bytes", ErrInvalid, maxDockerfile)
	}
	r, _ := c.open(e)
	c.dockerfile, err = io.ReadAll(r)
	return err
}

// Dockerfile is the Dockerfile read from the context, if one was named.
func (c *Context) Dockerfile() []byte { return c.dockerfile }

// applyIgnore drops what .dockerignore excludes. The client leaves it out
// already when it makes the tar; a context made otherwise gets the same.
func (c *Context) applyIgnore() error {
	e := c.entries[".dockerignore"]
	if e == nil || e.hdr.Typeflag != tar.TypeReg {
		return nil
	}
	r, err := c.open(e)
	if err != nil {
		return err
	}
	patterns, err := ignorefile.ReadAll(r)
	if err != nil {
		return fmt.Errorf("%w: .dockerignore: %v", ErrInvalid, err)
	}
	m, err := patternmatcher.New(patterns)
	if err != nil {
		return fmt.Errorf("%w: .dockerignore: %v", ErrInvalid, err)
	}
	for name := range c.entries {
		if ok, err := m.MatchesOrParentMatches(name); err == nil && ok {
			delete(c.entries, name)
		}
	}
	return nil
}

// Ignored reports whether a .dockerignore's patterns exclude name; the
// CLI uses it while it walks a context directory.
func Ignored(m *patternmatcher.PatternMatcher, name string) bool {
	ok, err := m.MatchesOrParentMatches(name)
	return err == nil && ok
}

// LoadIgnore reads a context directory's .dockerignore; nil when it has none.
func LoadIgnore(dir string) (*patternmatcher.PatternMatcher, error) {
	f, err := os.Open(path.Join(dir, ".dockerignore"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	return patternmatcher.New(patterns)
}

func (c *Context) open(e *entry) (io.Reader, error) {
	return io.NewSectionReader(c.f, e.offset, e.hdr.Size), nil
}

// match returns the entries a COPY source selects: the entry itself and,
// for a directory, everything under it, names relative to the source.
// A source with wildcards matches entries as path.Match does.
type selected struct {
	e   *entry
	rel string // the name under the destination
}

func (c *Context) match(src string) ([]selected, error) {
	var roots []string
	if strings.ContainsAny(src, "*?[") {
		for _, n := range c.names {
			if ok, err := path.Match(src, n); err != nil {
				return nil, fmt.Errorf("COPY source %s: %v", src, err)
			} else if ok {
				roots = append(roots, n)
			}
		}
	} else if src == "" || c.entries[src] != nil || c.hasUnder(src) {
		roots = []string{src}
	}
	if len(roots) == 0 {
		return nil, fmt.Errorf("COPY source %s: no such file in the build context (or .dockerignore excludes it)", srcName(src))
	}
	var out []selected
	for _, root := range roots {
		e := c.entries[root]
		if e != nil && e.hdr.Typeflag != tar.TypeDir {
			out = append(out, selected{e: e, rel: path.Base(root)})
			continue
		}
		// A directory: its contents, not itself, as Docker copies them.
		prefix := root + "/"
		if root == "" {
			prefix = ""
		}
		for _, n := range c.names {
			if strings.HasPrefix(n, prefix) {
				out = append(out, selected{e: c.entries[n], rel: strings.TrimPrefix(n, prefix)})
			}
		}
	}
	return out, nil
}

func srcName(src string) string {
	if src == "" {
		return "."
	}
	return src
}

func (c *Context) hasUnder(dir string) bool {
	prefix := dir + "/"
	i, _ := slices.BinarySearch(c.names, prefix)
	return i < len(c.names) && strings.HasPrefix(c.names[i], prefix)
}

// copySet is what one COPY puts where: entries by their name under dir.
type copySet struct {
	dir     string // absolute directory in the sandbox
	entries []selected
	single  string // a lone file copied to a file name: its name in dir
	unpack  bool   // entries that are tar archives are extracted into dir
}

// resolveCopy works out what a COPY step writes, as Docker does: a lone
// file to a destination not ending in "/" is that file; anything else
// goes into the destination directory.
func (c *Context) resolveCopy(s Step) (copySet, error) {
	var all []selected
	dirSource := false
	for _, src := range s.Sources {
		sel, err := c.match(src)
		if err != nil {
			return copySet{}, lineErr(s.Line, "%v", err)
		}
		if e := c.entries[src]; src == "" || e == nil || e.hdr.Typeflag == tar.TypeDir {
			dirSource = true
		}
		all = append(all, sel...)
	}
	dest := s.Dest
	if s.Unpack && !dirSource && slices.ContainsFunc(all, func(sel selected) bool { return c.isArchive(sel.e) }) {
		// ADD of archives: each is extracted into the destination (a
		// directory whatever its name ends with), other files copied.
		return copySet{dir: path.Clean(dest), entries: all, unpack: true}, nil
	}
	if len(all) == 1 && !dirSource && len(s.Sources) == 1 && !strings.HasSuffix(dest, "/") {
		return copySet{dir: path.Dir(dest), entries: all, single: path.Base(dest)}, nil
	}
	if len(s.Sources) > 1 && !strings.HasSuffix(dest, "/") {
		return copySet{}, lineErr(s.Line, "COPY of several sources needs a destination ending in /")
	}
	return copySet{dir: path.Clean(dest), entries: all}, nil
}

// digest is the content hash of what a COPY writes: names, types, modes,
// link targets and file contents, not times.
func (cs copySet) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "dir %s single %s unpack %v\n", cs.dir, cs.single, cs.unpack)
	for _, s := range cs.entries {
		hd := s.e.hdr
		fmt.Fprintf(h, "%q %c %o %q %s\n", s.rel, hd.Typeflag, hd.Mode&0o7777, hd.Linkname, s.e.sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeTar streams a copy set as a tar of names relative to its dir.
func (c *Context) writeTar(w io.Writer, cs copySet) error {
	tw := tar.NewWriter(w)
	for _, s := range cs.entries {
		if cs.unpack && c.isArchive(s.e) {
			if err := c.copyArchive(tw, s.e); err != nil {
				return err
			}
			continue
		}
		hdr := s.e.hdr
		hdr.Name = s.rel
		if cs.single != "" {
			hdr.Name = cs.single
		}
		if hdr.Typeflag == tar.TypeLink {
			// A hard link inside the context names its target by its
			// context name; out of the copy's reach it becomes a copy.
			t := c.entries[hdr.Linkname]
			if t == nil {
				continue
			}
			hdr = t.hdr
			hdr.Name = s.rel
			s = selected{e: t, rel: s.rel}
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			r, _ := c.open(s.e)
			if _, err := io.Copy(tw, r); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// archiveReader opens a context file as the tar stream it holds, plain,
// gzip or bzip2; ok is false for a file that is not one.
func (c *Context) archiveReader(e *entry) (r io.Reader, ok bool) {
	if e.hdr.Typeflag != tar.TypeReg || e.hdr.Size < 20 {
		return nil, false
	}
	raw, _ := c.open(e)
	br := bufio.NewReader(raw)
	magic, _ := br.Peek(3)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, false
		}
		r = zr
	case bytes.HasPrefix(magic, []byte("BZh")):
		r = bzip2.NewReader(br)
	default:
		r = br
	}
	// A tar stream has "ustar" at offset 257 of its first header.
	hb := bufio.NewReaderSize(r, 1024)
	head, err := hb.Peek(262)
	if err != nil || !bytes.HasPrefix(head[257:], []byte("ustar")) {
		return nil, false
	}
	return hb, true
}

func (c *Context) isArchive(e *entry) bool {
	_, ok := c.archiveReader(e)
	return ok
}

// copyArchive writes the entries of an archive in the context to tw, as
// they are: the sandbox's extraction refuses any that would land outside
// the destination.
func (c *Context) copyArchive(tw *tar.Writer, e *entry) error {
	r, ok := c.archiveReader(e)
	if !ok {
		return fmt.Errorf("%s is not an archive", e.hdr.Name)
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: archive %s: %v", ErrInvalid, e.hdr.Name, err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("%w: archive %s: %v", ErrInvalid, e.hdr.Name, err)
		}
	}
}
