// SPDX-License-Identifier: Apache-2.0
package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem in a config file. Parse returns every Error it finds, joined with
// errors.Join; errors.As finds the first.
type Error struct {
	// File is the name given to Parse (the path, for Load).
	File string
	// Line is the 1-based line of the offending key or value; 0 when the problem concerns the
	// whole file (it is empty, or unreadable before any line).
	Line int
	// Path is the field path, such as services[0].ports[1].protocol; empty for the document
	// itself and for YAML syntax errors.
	Path string
	// Err says what is wrong.
	Err error
}

// Error returns "file:line: path: what is wrong", leaving out the line or path when there is
// none.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// maxErrors is how many errors Parse reports; a file with more gets a last line counting the
// rest, since past a few dozen the later ones are usually consequences of the first.
const maxErrors = 20

// joinErrors sorts errs by line (stable, so errors of one line keep their walk order) and joins
// the first maxErrors of them.
func joinErrors(file string, errs []*Error) error {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	var out []error
	for i, e := range errs {
		if i == maxErrors {
			out = append(out, &Error{File: file, Err: fmt.Errorf("%d more errors not shown", len(errs)-maxErrors)})
			break
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// yamlLine matches the "line N: " yaml.v3 puts in front of syntax errors when it knows the line.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the syntax errors yaml.v3's parser (not its scanner) reports. It numbers
// their lines from 0, unlike the scanner's, so syntaxError adds one.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// syntaxError turns a yaml.v3 syntax error into an Error with the file and a 1-based line.
// yaml.v3 leaves the line out when it is the first, and for invalid characters (found by its
// reader, which counts bytes, not lines); their line is found here.
func syntaxError(file string, data []byte, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if parserProblems[m[2]] {
			line++
		}
		return &Error{File: file, Line: line, Err: fmt.Errorf("YAML syntax error: %s", m[2])}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 1
	if off := badCharOffset(data); off >= 0 {
		line = 1 + bytes.Count(data[:off], []byte("\n"))
	}
	return &Error{File: file, Line: line, Err: fmt.Errorf("YAML syntax error: %s", msg)}
}

// badCharOffset returns the offset of the first byte that is not valid UTF-8 or is a character
// YAML does not allow (control characters other than tab and line breaks), or -1.
func badCharOffset(data []byte) int {
	for off := 0; off < len(data); {
		r, size := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && size <= 1 {
			return off
		}
		ok := r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
			(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || (r >= 0x10000 && r <= 0x10ffff)
		if !ok {
			return off
		}
		off += size
	}
	return -1
}
