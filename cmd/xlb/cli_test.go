// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIHelp checks the command line's conventions: a short top-level usage with one line
// per command, each command's help listing its flags with their defaults, shell completion,
// and exit code 2 (with a pointer to --help) for a wrong command line.
func TestCLIHelp(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := execute(args, &out, &errb)
		return rc, out.String(), errb.String()
	}
	rc, out, _ := run("--help")
	if rc != 0 {
		t.Fatalf("xlb --help: exit %d", rc)
	}
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("xlb --help: %d lines, want a short usage:\n%s", n, out)
	}
	for _, c := range []string{"run", "agent", "cleanup", "show", "bgp", "bfd", "convert", "version", "completion"} {
		if !strings.Contains(out, "\n  "+c+" ") {
			t.Errorf("xlb --help lists no %q command:\n%s", c, out)
		}
	}
	for _, c := range []struct {
		cmd  []string
		want []string
	}{
		{[]string{"run", "--help"}, []string{"--config file", "--cleanup-on-exit", "Examples:"}},
		{[]string{"show", "--help"}, []string{`(default "/sys/fs/bpf/xlb")`, "--limit N", "(default 1000)", "flows"}},
		{[]string{"agent", "--help"}, []string{`(default "127.0.0.1:9612")`, "--dsr-hairpin", "(default true)"}},
		{[]string{"bgp", "--help"}, []string{"--listen address", `(default "127.0.0.1:9610")`}},
		{[]string{"help", "convert"}, []string{"--gateway name"}},
	} {
		rc, out, _ := run(c.cmd...)
		for _, w := range c.want {
			if rc != 0 || !strings.Contains(out, w) {
				t.Errorf("xlb %v: exit %d, no %q in:\n%s", c.cmd, rc, w, out)
			}
		}
	}
	if rc, out, _ := run("completion", "bash"); rc != 0 || !strings.Contains(out, "__start_xlb") {
		t.Errorf("xlb completion bash: exit %d, %d bytes", rc, len(out))
	}
	rc, out, _ = run("version", "--json")
	var b BuildInfo
	if err := json.Unmarshal([]byte(out), &b); rc != 0 || err != nil || b.GoVersion == "" {
		t.Errorf("xlb version --json: exit %d, %v: %q", rc, err, out)
	}
	if rc, out, _ := run("--version"); rc != 0 || !strings.HasPrefix(out, "xlb ") {
		t.Errorf("xlb --version: exit %d, %q", rc, out)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"run"}, "--config is required"},
		{[]string{"run", "--config", "x", "extra"}, `unknown command "extra"`},
		{[]string{"cleanup", "--pin-pth", "/x"}, "unknown flag: --pin-pth"},
		{[]string{"agent", "--max-sockets", "many"}, `invalid argument "many"`},
		{[]string{"convert"}, "--config is required"},
		{[]string{"bfd", "status"}, "--config is required"},
		{[]string{"version", "extra"}, `unknown command "extra"`},
	} {
		rc, out, errb := run(c.args...)
		if rc != 2 || out != "" || !strings.Contains(errb, c.msg) || !strings.Contains(errb, "--help' for usage") {
			t.Errorf("xlb %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, rc, out, errb, c.msg)
		}
	}
	// A failure of a command that started is exit 1, without the usage hint.
	if rc, _, errb := run("bgp", "--listen", "127.0.0.1:1"); rc != 1 || strings.Contains(errb, "for usage") {
		t.Errorf("xlb bgp against nothing: exit %d, %q; want exit 1", rc, errb)
	}
}

// TestManPages: xlb man writes a page per command from the definitions of --help, the same on
// every run (the .deb is reproducible).
func TestManPages(t *testing.T) {
	read := func() map[string]string {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		if rc := execute([]string{"man", "--dir", dir}, &out, &errb); rc != 0 {
			t.Fatalf("xlb man: exit %d: %s", rc, errb.String())
		}
		pages := map[string]string{}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			pages[e.Name()] = string(b)
		}
		return pages
	}
	a := read()
	for page, want := range map[string]string{"xlb.8": "xlb-show(8)", "xlb-show.8": `\fB--limit\fP`, "xlb-agent.8": `\fB--dsr-interface\fP`, "xlb-run.8": "SIGHUP"} {
		if !strings.Contains(a[page], want) {
			t.Errorf("%s: no %q in:\n%s", page, want, a[page])
		}
	}
	if b := read(); !maps.Equal(a, b) {
		t.Error("two runs of xlb man wrote different pages")
	}
}
