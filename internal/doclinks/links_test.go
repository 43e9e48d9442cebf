// SPDX-License-Identifier: Apache-2.0
package doclinks

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the folder holding go.mod, above the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// pages lists the repository's Markdown pages: git's tracked and untracked-but-not-ignored
// files when git can say, else a walk that leaves out hidden folders, bin/ and testdata/.
func pages(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md")
	cmd.Dir = root
	if b, err := cmd.Output(); err == nil {
		for _, p := range strings.Split(string(b), "\x00") {
			if p == "" || strings.Contains(p, "/testdata/") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, p)); err == nil { // deleted, not yet staged
				out = append(out, p)
			}
		}
		sort.Strings(out)
		return out
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLinks: every link of every Markdown page of the repository resolves — relative links to
// files and folders that exist, anchors to headings of the page they name, external links
// well-formed (not fetched).
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	list := pages(t, root)
	// The pages every reader starts from must be among those checked.
	for _, must := range []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/README.md", "docs/performance.md"} {
		found := false
		for _, p := range list {
			found = found || p == must
		}
		if !found {
			t.Errorf("%s is not among the pages checked (%d pages)", must, len(list))
		}
	}
	problems, err := Check(root, list)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	links := 0
	for _, p := range list {
		src, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		links += len(Parse(src).Links)
	}
	if links < 100 {
		t.Fatalf("only %d links in %d pages: the parser or the page list is wrong", links, len(list))
	}
	t.Logf("%d links in %d pages", links, len(list))
}

// trackerRef is a reference to a tracker's issue in prose ("issue 19", "issues #3 and 4").
var trackerRef = regexp.MustCompile(`(?i)\b(issue|ticket|bug)s? #?[0-9]+\b`)

// TestNoTrackerNumbers: the Markdown speaks to its reader, not to a tracker: no page names an
// issue by its number (a link to another project's issue is an address, not prose).
func TestNoTrackerNumbers(t *testing.T) {
	root := repoRoot(t)
	for _, p := range pages(t, root) {
		src, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := trackerRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: say what it was, not its tracker number", p, i+1, m)
			}
		}
	}
	if !trackerRef.MatchString("as issue 23 asked") || trackerRef.MatchString("github.com/x/y/issues/97076") {
		t.Error("trackerRef matches the wrong things")
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Installing xlb", "installing-xlb"},
		{"Forwarding mode: DNAT with the gateway on the return path", "forwarding-mode-dnat-with-the-gateway-on-the-return-path"},
		{"What the programs do (`xdp/socklb/bpf/socklb.c`)", "what-the-programs-do-xdpsocklbbpfsocklbc"},
		{"Connections per second (the `cps` rows)", "connections-per-second-the-cps-rows"},
		{"The latest run (2026-12-03 07:40): VALID", "the-latest-run-2026-12-03-0740-valid"},
		{"Kubernetes with Helm", "kubernetes-with-helm"},
		{"**Bold** and *em* and a [link](x.md)", "bold-and-em-and-a-link"},
		{"snake_case stays", "snake_case-stays"},
		{"Two  spaces", "two--spaces"},
		{"Ünïcode letters", "ünïcode-letters"},
		{"xlb.dev/v1alpha1 objects", "xlbdevv1alpha1-objects"},
	} {
		if got := Slug(c.in); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	src := strings.Join([]string{
		"# Title",
		"See [a](a.md) and ![img](pic.svg \"title\") and [b](<b c.md>), `[not](code.md)`.",
		"```sh",
		"[not](fenced.md)",
		"## Not a heading in a fence",
		"```",
		"## Title",
		"## Title",
		"[ref]: ref.md#x",
		"<https://example.com/x> <a href=\"h.md\">h</a> <a id=\"custom\"></a>",
		"[p](f(1).md) [q](#title-1)",
		"    # indented four: code, but still read as text here, not a heading",
		"",
		"Setext one",
		"==========",
		"Setext `two`",
		"---",
		"",
		"---",
		"- a list item",
		"---",
		"| a | table |",
		"|---|---|",
	}, "\n")
	p := Parse([]byte(src))
	var got []string
	for _, l := range p.Links {
		got = append(got, l.Target)
	}
	want := []string{"a.md", "pic.svg", "b c.md", "ref.md#x", "https://example.com/x", "h.md", "f(1).md", "#title-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
	if p.Links[3].Line != 9 {
		t.Errorf("the reference definition is on line %d, want 9", p.Links[3].Line)
	}
	for _, a := range []string{"title", "title-1", "title-2", "custom", "setext-one", "setext-two"} {
		if !p.Anchors[a] {
			t.Errorf("anchor %q missing: %v", a, p.Anchors)
		}
	}
	if p.Anchors["not-a-heading-in-a-fence"] {
		t.Error("a heading inside a fenced block made an anchor")
	}
	for _, a := range []string{"", "--a-list-item", "a-list-item", "-a--table-"} {
		if p.Anchors[a] {
			t.Errorf("a thematic break, list item or table row made the anchor %q", a)
		}
	}
	if len(p.Anchors) != 6 {
		t.Errorf("anchors %v, want exactly 6", p.Anchors)
	}
}

// TestCheck: the checker reports each kind of broken link and none of the good ones.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B\n## Part two\n")
	write("src/x.go", "package x\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[ok](docs/b.md) [ok](docs/b.md#part-two) [ok](#top) [ok](docs/) [ok](src/x.go#L1)",
		"[ok](https://example.com/a#b) [ok](mailto:a@example.com)",
		"[bad](docs/missing.md)",
		"[bad](docs/b.md#part-three)",
		"[bad](#nowhere)",
		"[bad](../outside.md)",
		"[bad](/docs/b.md)",
		"[bad](https:///nohost)",
		"[bad](ftp://example.com/x)",
		"[bad](src/x.go#section)",
		"[bad]()",
	}, "\n"))
	problems, err := Check(root, []string{"README.md", "docs/b.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Target)
	}
	want := []string{"docs/missing.md", "docs/b.md#part-three", "#nowhere", "../outside.md", "/docs/b.md",
		"https:///nohost", "ftp://example.com/x", "src/x.go#section", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems %q, want %q\n%v", got, want, problems)
	}
	for _, p := range problems {
		if p.File != "README.md" || p.Line < 4 || p.Reason == "" {
			t.Errorf("problem without its place or reason: %+v", p)
		}
	}
}
