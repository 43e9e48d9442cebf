// SPDX-License-Identifier: Apache-2.0

// Command spdx checks, or with -fix adds, the SPDX license header of every source file of the
// repository: Apache-2.0 for the project, (GPL-2.0-only OR BSD-2-Clause) for the BPF C that is
// loaded into the kernel. Generated files (bpf2go, controller-gen) and fuzz corpora are left
// alone: their generators write them. Run from the repository's root:
//
//	go run ./internal/tools/spdx        # list the files without their header; exit 1 if any
//	go run ./internal/tools/spdx -fix   # add the header to them
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
)

// Licenses of the repository's files.
const (
	// Project is the license of everything but the BPF C.
	Project = "Apache-2.0"
	// BPF is the license of the BPF C programs and headers (as Cilium's): the kernel needs a
	// GPL-compatible one for its GPL-only helpers, their SEC("license") says "Dual BSD/GPL".
	BPF = "(GPL-2.0-only OR BSD-2-Clause)"
)

// A style is how a kind of file carries its header line.
type style struct {
	license string
	prefix  string // the comment's opening
	suffix  string // its closing ("" for line comments)
}

// line is the header line of s.
func (s style) line() string {
	return s.prefix + "SPDX-License-Identifier: " + s.license + s.suffix
}

// styleOf returns how the file at p (slash-separated, relative to the repository's root) carries
// its header, and false for a file that carries none (documentation, data, generated files).
func styleOf(p string) (style, bool) {
	base, ext := path.Base(p), path.Ext(p)
	switch {
	case strings.Contains(p, "/testdata/fuzz/"), strings.HasPrefix(p, "deploy/helm/xlb/crds/"):
		return style{}, false
	case ext == ".go":
		return style{Project, "// ", ""}, true
	case ext == ".c":
		return style{BPF, "// ", ""}, true
	case ext == ".h":
		// The kernel's convention: a block comment in headers.
		return style{BPF, "/* ", " */"}, true
	case strings.HasPrefix(p, "deploy/helm/") && strings.Contains(p, "/templates/") && (ext == ".yaml" || ext == ".tpl" || ext == ".txt"):
		// A template comment, trimmed both sides: the rendered manifests do not change.
		return style{Project, "{{- /* ", " */ -}}"}, true
	case ext == ".sh" || ext == ".py" || ext == ".yaml" || ext == ".yml" || ext == ".service",
		base == "Makefile" || base == "Vagrantfile" || p == ".ci/run":
		return style{Project, "# ", ""}, true
	}
	return style{}, false
}

// generated reports whether data is a generated Go file (go help generate's marker).
func generated(data []byte) bool {
	head := data[:min(len(data), 1024)]
	return bytes.Contains(head, []byte("Code generated")) && bytes.Contains(head, []byte("DO NOT EDIT"))
}

// headed reports whether data has s's header: on its first line, or its second after a #!
// line. A file with another SPDX header is not headed (the wrong license).
func headed(data []byte, s style) bool {
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	if bytes.HasPrefix(first, []byte("#!")) {
		first, _, _ = bytes.Cut(rest, []byte("\n"))
	}
	return string(bytes.TrimRight(first, "\r")) == s.line()
}

// fix returns data with s's header added (after a #! line, and a blank line before a Go build
// constraint or a package doc comment, so that neither becomes part of the header).
func fix(data []byte, s style) []byte {
	var out bytes.Buffer
	if bytes.HasPrefix(data, []byte("#!")) {
		first, rest, _ := bytes.Cut(data, []byte("\n"))
		out.Write(first)
		out.WriteString("\n")
		data = rest
	}
	// Drop a wrong SPDX line: the file gets one header, the right one.
	if first, rest, ok := bytes.Cut(data, []byte("\n")); ok && bytes.Contains(first, []byte("SPDX-License-Identifier:")) {
		data = rest
	}
	out.WriteString(s.line())
	out.WriteString("\n")
	if s.prefix == "// " && bytes.HasPrefix(data, []byte("//")) {
		out.WriteString("\n")
	}
	out.Write(data)
	return out.Bytes()
}

// files lists the repository's files, tracked and new (not ignored).
func files() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var list []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			list = append(list, f)
		}
	}
	return list, nil
}

// Missing returns the files of list (read relative to the working directory) that lack their
// header, and with fixIt writes the header into them.
func Missing(list []string, fixIt bool) ([]string, error) {
	var missing []string
	for _, p := range list {
		s, ok := styleOf(p)
		if !ok {
			continue
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			return nil, err
		}
		if generated(data) || headed(data, s) {
			continue
		}
		missing = append(missing, p)
		if fixIt {
			fi, err := os.Stat(p)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, fix(data, s), fi.Mode().Perm()); err != nil {
				return nil, fmt.Errorf("add the SPDX header to %s: %w", p, err)
			}
		}
	}
	return missing, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spdx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fixIt := fs.Bool("fix", false, "add the missing headers")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	list, err := files()
	if err != nil {
		fmt.Fprintf(stderr, "spdx: %v\n", err)
		return 1
	}
	missing, err := Missing(list, *fixIt)
	if err != nil {
		fmt.Fprintf(stderr, "spdx: %v\n", err)
		return 1
	}
	for _, p := range missing {
		fmt.Fprintln(stdout, p)
	}
	if len(missing) > 0 && !*fixIt {
		fmt.Fprintf(stderr, "spdx: %d files lack their SPDX-License-Identifier header: run make spdx\n", len(missing))
		return 1
	}
	return 0
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
