// Command runsc-seccomp precompiles runsc's seccomp-bpf programs into a
// writable copy of the gVisor module source, as gVisor's own Bazel build
// does, so that a runsc built from that copy installs its filters without
// compiling them at every sandbox start and restore.
//
// A runsc built by `go install gvisor.dev/gvisor/runsc@VERSION` has
// PrecompilationDisabledAtBuildTime = true and no programs: each sandbox
// process and each gofer compiles its filter from the syscall rules at start
// (tens of milliseconds of CPU each). This tool calls the two
// PrecompiledPrograms functions (runsc/boot/filter/config and
// runsc/fsgofer/filter/config) and overwrites the two filter_precompiled.go
// files of the copy with ones that hold the programs.
//
// scripts/install-deps.sh copies this file into the copy of the gVisor
// module it builds runsc from and runs it there, so the programs always come
// from the very source being built, whatever RUNSC_VERSION says; the go.mod
// beside this file pins the same gVisor as install-deps.sh for building and
// vetting it on its own.
//
// Usage:
//
//	go run . -src DIR [-all]
//
// DIR is the root of the writable gVisor module copy (the directory holding
// its go.mod). Without -all, the sandbox's programs for the GPU, TPU and
// RDMA device proxies (NVProxy, TPUProxy, RDMAProxy; 552 of 576 variants,
// some 50 MB of Go source) are left out: cove never enables them, and a
// configuration without a precompiled program falls back to compiling its
// filter at start, as a plain build does for every configuration.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// target is one filter_precompiled.go to replace.
type target struct {
	// rel is the file's path in the module.
	rel string
	// programs returns the programs to precompile into it.
	programs func() ([]precompiledseccomp.Program, error)
	// keep says whether to embed a program, by its name (its options'
	// ConfigKey).
	keep func(name string) bool
}

func main() {
	src := flag.String("src", "", "root of a writable copy of the gVisor module (required)")
	all := flag.Bool("all", false, "also embed the sandbox's programs for the GPU, TPU and RDMA device proxies")
	flag.Parse()
	if *src == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: runsc-seccomp -src DIR [-all]")
		os.Exit(2)
	}
	keepAll := func(string) bool { return true }
	bootKeep := keepAll
	if !*all {
		bootKeep = withoutDeviceProxies
	}
	targets := []target{
		{rel: "runsc/fsgofer/filter/filter_precompiled.go", programs: goferconfig.PrecompiledPrograms, keep: keepAll},
		{rel: "runsc/boot/filter/filter_precompiled.go", programs: bootconfig.PrecompiledPrograms, keep: bootKeep},
	}
	for _, t := range targets {
		if err := generate(*src, t); err != nil {
			fmt.Fprintf(os.Stderr, "runsc-seccomp: %s: %v\n", t.rel, err)
			os.Exit(1)
		}
	}
}

// withoutDeviceProxies keeps the sandbox's programs that enable none of the
// device proxies.
func withoutDeviceProxies(name string) bool {
	for _, on := range []string{"NVProxy=true", "TPUProxy=true", "RDMAProxy=true"} {
		if strings.Contains(" "+name+" ", " "+on+" ") {
			return false
		}
	}
	return true
}

func generate(root string, t target) error {
	path := filepath.Join(root, t.rel)
	orig, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	pkg, err := checkShape(path, orig)
	if err != nil {
		return err
	}

	start := time.Now()
	programs, err := t.programs()
	if err != nil {
		return fmt.Errorf("precompile: %w", err)
	}
	seen := make(map[string]bool, len(programs))
	var kept []precompiledseccomp.Program
	for _, p := range programs {
		if p.Name == "" || seen[p.Name] {
			return fmt.Errorf("precompile: empty or duplicate program name %q", p.Name)
		}
		seen[p.Name] = true
		if t.keep(p.Name) {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return fmt.Errorf("precompile: no programs to embed (of %d)", len(programs))
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Name < kept[j].Name })

	out := render(pkg, kept)
	// Write beside and rename, so an interrupted run leaves the original.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	words := 0
	for _, p := range kept {
		words += len(p.Bytecode32)
	}
	fmt.Fprintf(os.Stderr, "runsc-seccomp: %s: %d of %d programs (%d BPF instructions, %s GOARCH) precompiled in %s\n",
		t.rel, len(kept), len(programs), words/2, runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	return nil
}

// The declarations of the stub filter_precompiled.go a `go install` build
// has; the generated file provides the exported ones, and none of the others
// may be used elsewhere in the package (the build would catch it).
var (
	stubExported = []string{"PrecompilationDisabledAtBuildTime", "GetPrecompiled", "ListPrecompiled"}
	stubKnown    = map[string]bool{
		"PrecompilationDisabledAtBuildTime": true,
		"GetPrecompiled":                    true,
		"ListPrecompiled":                   true,
		"precompiledPrograms":               true,
		"registerPrecompiledProgramsOnce":   true,
		"registerPrograms":                  true,
	}
)

// checkShape makes sure the file being replaced is the stub this tool knows
// (precompilation disabled, the same top-level declarations), so that a
// gVisor that changes it fails here, loudly, rather than being half-patched.
// It returns the file's package name.
func checkShape(path string, src []byte) (string, error) {
	if !bytes.Contains(src, []byte("const PrecompilationDisabledAtBuildTime = true")) {
		return "", fmt.Errorf("not the stub of a plain build (no %q): already generated, or a gVisor this tool does not know",
			"const PrecompilationDisabledAtBuildTime = true")
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				return "", fmt.Errorf("unexpected method %s", d.Name.Name)
			}
			have[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						have[n.Name] = true
					}
				case *ast.TypeSpec:
					have[s.Name.Name] = true
				}
			}
		}
	}
	for name := range have {
		if !stubKnown[name] {
			return "", fmt.Errorf("unexpected declaration %s: a gVisor this tool does not know", name)
		}
	}
	for _, name := range stubExported {
		if !have[name] {
			return "", fmt.Errorf("no %s: a gVisor this tool does not know", name)
		}
	}
	return f.Name.Name, nil
}

// render writes the replacement file: the same API as the stub, with each
// program built only when asked for (a switch, as gVisor's current
// generator does) rather than all of them registered in a map at the first
// lookup; each call returns a fresh copy, which RenderInstructions may
// modify.
func render(pkg string, programs []precompiledseccomp.Program) []byte {
	const q = "precompiledseccomp"
	var b bytes.Buffer
	fmt.Fprintf(&b, `// Code generated by cove's scripts/runsc-seccomp from PrecompiledPrograms(). DO NOT EDIT.

package %s

import (
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
)

// PrecompilationDisabledAtBuildTime is a constant that is used to
// indicate that precompilation was disabled at build time.
const PrecompilationDisabledAtBuildTime = false

// precompiledNames lists the embedded programs' names, sorted.
var precompiledNames = []string{
`, pkg)
	for _, p := range programs {
		fmt.Fprintf(&b, "\t%q,\n", p.Name)
	}
	b.WriteString(`}

// ListPrecompiled returns a list of all registered program names.
func ListPrecompiled() []string {
	return append([]string(nil), precompiledNames...)
}

// GetPrecompiled returns the precompiled program for the given name,
// and whether that program name exists.
func GetPrecompiled(programName string) (precompiledseccomp.Program, bool) {
	switch programName {
`)
	for _, p := range programs {
		fmt.Fprintf(&b, "\tcase %q:\n\t\treturn %s, true\n", p.Name, p.Expr("\t\t", q))
	}
	fmt.Fprintf(&b, "\t}\n\treturn %s.Program{}, false\n}\n", q)
	return b.Bytes()
}
