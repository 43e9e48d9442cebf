// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/debpkg"
)

// TestDebPackage: `make deb`'s package installs with dpkg -i into a clean Debian 12 root built
// by mmdebstrap from the apt registry (minbase, systemd, iproute2, procps); dpkg registers
// /etc/xlb/xlb.yaml as a conffile; systemd-analyze verify accepts the unit there; and the
// packaged xlb, run from that root, is both gateways of a lab site that passes the demonstration.
func TestDebPackage(t *testing.T) {
	for _, bin := range []string{"mmdebstrap", "dpkg-deb", "chroot"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s (make deps installs mmdebstrap): %v", bin, err)
		}
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	dir := t.TempDir()
	bin := filepath.Join(dir, "xlb")
	const ver = "v0.9.0-debtest"
	build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-ldflags", "-s -w -X main.version="+ver, "-o", bin, "./cmd/xlb")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static xlb: %v\n%s", err, out)
	}
	deb := filepath.Join(dir, "xlb.deb")
	if err := debpkg.Build(debpkg.Options{Binary: bin, Version: ver, Arch: "amd64",
		Unit: filepath.Join(repo, "deploy/deb/xlb.service"), Config: filepath.Join(repo, "deploy/xlb.example.yaml"),
		Copyright: filepath.Join(repo, "deploy/deb/copyright"), Out: deb}); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if out, err := exec.Command("mmdebstrap", "--variant=minbase", "--include=systemd,iproute2,procps", "bookworm", root).CombinedOutput(); err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, tailLines(string(out), 20))
	}
	chroot := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("chroot %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "xlb.deb"), mustRead(t, deb), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dpkg -i:\n%s", chroot("dpkg", "-i", "/tmp/xlb.deb"))
	if got := chroot("dpkg-query", "-W", "-f", "${Version} ${Conffiles}", "xlb"); !strings.HasPrefix(got, "0.9.0+debtest ") ||
		!strings.Contains(got, "/etc/xlb/xlb.yaml") {
		t.Errorf("dpkg-query: %q, want version 0.9.0+debtest and /etc/xlb/xlb.yaml a conffile", got)
	}
	chroot("systemd-analyze", "verify", "/lib/systemd/system/xlb.service")
	if got := chroot("/usr/bin/xlb", "version"); !strings.HasPrefix(got, "xlb "+ver+"\n") {
		t.Errorf("the packaged xlb version: %q", got)
	}

	s := NewT(t, Options{XLB: filepath.Join(root, "usr", "bin", "xlb"), Routing: Static, Mode: File})
	var b bytes.Buffer
	if err := s.Demo(context.Background(), &b); err != nil {
		t.Fatalf("the lab with the packaged xlb: %v\n%s", err, b.String())
	}
	t.Logf("the packaged xlb ran both gateways of a lab site through the demonstration")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
