// SPDX-License-Identifier: Apache-2.0
package doclinks

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Link is one link target found in a Markdown page, with the line it is on (from 1).
type Link struct {
	Line   int
	Target string
}

// Page is what one Markdown page asks for (its links) and offers (the anchors of its headings,
// and of HTML id and name attributes).
type Page struct {
	Links   []Link
	Anchors map[string]bool
}

// Problem is a link that does not resolve.
type Problem struct {
	File   string // the page, relative to the root
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	refDef     = regexp.MustCompile(`^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)`)
	autolink   = regexp.MustCompile(`<((?:https?|mailto):[^>\s]*)>`)
	htmlURL    = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlID     = regexp.MustCompile(`(?i)<[a-z][^>]*\b(?:id|name)\s*=\s*"([^"]*)"`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)
	// setextUnderline is the line under a setext heading's text: = for level 1, - for level 2.
	setextUnderline = regexp.MustCompile(`^(=+|-+)[ \t]*$`)
	listItem        = regexp.MustCompile(`^([-*+]|[0-9]+[.)])([ \t]|$)`)
)

// setextText reports whether a line (indentation removed) can be the text of a setext heading:
// a paragraph's line, not blank, not a table row, list item, quote or HTML block.
func setextText(trimmed string) bool {
	if strings.TrimSpace(trimmed) == "" || listItem.MatchString(trimmed) {
		return false
	}
	switch trimmed[0] {
	case '|', '>', '<':
		return false
	}
	return !strings.Contains(trimmed, " | ")
}

// Parse reads a Markdown page's links and anchors. Code blocks and code spans are not read:
// what they hold is code, not links.
func Parse(src []byte) Page {
	p := Page{Anchors: map[string]bool{}}
	seen := map[string]int{}
	heading := func(text string) {
		slug := Slug(text)
		if k := seen[slug]; k > 0 {
			p.Anchors[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			p.Anchors[slug] = true
		}
		seen[slug]++
	}
	var fence string // the opening fence of the code block we are in, or ""
	prev := ""       // the previous line, when it could be a setext heading's text
	for i, line := range strings.Split(string(src), "\n") {
		n := i + 1
		line = strings.TrimRight(line, "\r")
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if len(line)-len(trimmed) <= 3 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			c := trimmed[:1]
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, c))]
			prev = ""
			continue
		}
		if prev != "" && len(line)-len(trimmed) <= 3 && setextUnderline.MatchString(trimmed) {
			heading(prev) // a setext heading: its text is the line above
			prev = ""
			continue
		}
		text := blankCodeSpans(line)
		if m := atxHeading.FindStringSubmatch(text); m != nil {
			// The slug is made from the heading as written, code spans included.
			heading(atxHeading.FindStringSubmatch(line)[2])
			prev = ""
		} else if setextText(trimmed) {
			prev = strings.TrimSpace(line)
		} else {
			prev = ""
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			p.Links = append(p.Links, Link{n, strings.Trim(m[2], "<>")})
		}
		for _, t := range inlineTargets(text) {
			p.Links = append(p.Links, Link{n, t})
		}
		for _, m := range autolink.FindAllStringSubmatch(text, -1) {
			p.Links = append(p.Links, Link{n, m[1]})
		}
		for _, m := range htmlURL.FindAllStringSubmatch(text, -1) {
			p.Links = append(p.Links, Link{n, m[1]})
		}
		for _, m := range htmlID.FindAllStringSubmatch(text, -1) {
			p.Anchors[m[1]] = true
		}
	}
	return p
}

// blankCodeSpans replaces what code spans hold (and their backticks) with spaces, so that
// nothing in them is taken for a link; a backtick run without its closing run stays as it is.
func blankCodeSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		run := j - i
		end := -1
		for k := j; k < len(b); {
			if b[k] != '`' {
				k++
				continue
			}
			l := k
			for l < len(b) && b[l] == '`' {
				l++
			}
			if l-k == run {
				end = l
				break
			}
			k = l
		}
		if end < 0 {
			i = j
			continue
		}
		for k := i; k < end; k++ {
			b[k] = ' '
		}
		i = end
	}
	return string(b)
}

// inlineTargets returns the destinations of the inline links and images of one line: what
// follows each "](" up to the closing parenthesis (balanced), without a title.
func inlineTargets(s string) []string {
	var out []string
	for i := 0; ; {
		k := strings.Index(s[i:], "](")
		if k < 0 {
			return out
		}
		start := i + k + 2
		rest := strings.TrimLeft(s[start:], " \t")
		var dest string
		if strings.HasPrefix(rest, "<") {
			if e := strings.IndexByte(rest, '>'); e > 0 {
				dest = rest[1:e]
			}
		} else {
			depth := 0
			e := 0
		scan:
			for ; e < len(rest); e++ {
				switch rest[e] {
				case '(':
					depth++
				case ')':
					if depth == 0 {
						break scan
					}
					depth--
				case ' ', '\t':
					break scan
				}
			}
			dest = rest[:e]
		}
		out = append(out, dest)
		i = start
	}
}

// Slug is the anchor GitHub gives a heading (before a repeated heading's "-1", "-2" ...): the
// rendered text lower-cased, each space a hyphen, every character but letters, digits, marks,
// hyphens and underscores left out. Code spans keep their text; links keep their text.
func Slug(heading string) string {
	h := inlineLink.ReplaceAllString(heading, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.TrimSpace(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(unicode.ToLower(r))
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Check reads every page (paths relative to root, slash-separated) and returns the links that do
// not resolve: a relative link to a file or folder that does not exist or lies outside root, an
// anchor that is no heading of its Markdown page, an external link that is not a well-formed
// http(s) or mailto address. External links are not fetched.
func Check(root string, pages []string) ([]Problem, error) {
	parsed := map[string]Page{}
	load := func(rel string) (Page, error) {
		if p, ok := parsed[rel]; ok {
			return p, nil
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return Page{}, fmt.Errorf("read the page %s: %w", rel, err)
		}
		p := Parse(src)
		parsed[rel] = p
		return p, nil
	}
	var problems []Problem
	for _, rel := range pages {
		page, err := load(rel)
		if err != nil {
			return nil, err
		}
		for _, l := range page.Links {
			reason, err := checkLink(root, rel, l.Target, load)
			if err != nil {
				return nil, err
			}
			if reason != "" {
				problems = append(problems, Problem{rel, l.Line, l.Target, reason})
			}
		}
	}
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

// checkLink says what is wrong with one link of the page rel, or "" when it resolves.
func checkLink(root, rel, target string, load func(string) (Page, error)) (string, error) {
	if target == "" {
		return "empty link", nil
	}
	if u, err := url.Parse(target); err == nil && u.Scheme != "" {
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				return "an http(s) link without a host", nil
			}
			if strings.ContainsAny(target, " \t") {
				return "a space in an http(s) link", nil
			}
			return "", nil
		case "mailto":
			if u.Opaque == "" || !strings.Contains(u.Opaque, "@") {
				return "a mailto link without an address", nil
			}
			return "", nil
		default:
			return fmt.Sprintf("scheme %q: only http, https, mailto and relative links", u.Scheme), nil
		}
	} else if err != nil && strings.Contains(target, "://") {
		return fmt.Sprintf("malformed address: %v", err), nil
	}
	if strings.HasPrefix(target, "/") {
		return "an absolute path: GitHub resolves it outside the repository; use a relative link", nil
	}
	p, frag, _ := strings.Cut(target, "#")
	if strings.Contains(p, "?") {
		return "a query in a relative link", nil
	}
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("malformed path: %v", err), nil
	}
	dest := rel
	if p != "" {
		dest = path.Clean(path.Join(path.Dir(rel), p))
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "outside the repository", nil
		}
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
	if err != nil {
		return fmt.Sprintf("%s does not exist", dest), nil
	}
	if frag == "" {
		return "", nil
	}
	if info.IsDir() || !strings.HasSuffix(strings.ToLower(dest), ".md") {
		if !info.IsDir() && lineAnchor.MatchString(frag) {
			return "", nil // a line of a source file, as GitHub shows it
		}
		return fmt.Sprintf("anchor #%s on %s, which is not a Markdown page", frag, dest), nil
	}
	page, err := load(dest)
	if err != nil {
		return "", err
	}
	if !page.Anchors[frag] {
		return fmt.Sprintf("no heading of %s has the anchor #%s", dest, frag), nil
	}
	return "", nil
}
