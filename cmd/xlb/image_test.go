// SPDX-License-Identifier: Apache-2.0
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/containerdtest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/ociimage"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// TestImage builds xlb's image as `make image` does (a static binary, then internal/ociimage),
// imports it into a private containerd with ctr, runs `xlb version` in it (the version and the
// build settings the binary was linked with), then runs the node agent from it as
// deploy/agent.yaml does (privileged, the host's network, its bpffs, cgroup tree and netns
// directory mounted) through TestAgentE2E's whole scenario: Services balanced at a namespace's
// sockets, the takeover refused, UDP sockets reaped, the agent stopped and restarted.
func TestImage(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := t.TempDir()
	bin := filepath.Join(dir, "xlb")
	const ver = "v0.0.0-imagetest"
	build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-ldflags", "-s -w -X main.version="+ver, "-o", bin, ".")
	build.Dir = filepath.Dir(file)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static xlb: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "xlb-image.tar")
	ref, digest, err := ociimage.Build(bin, archive, "xlb.dev/xlb")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s %s", ref, digest)

	c := containerdtest.Start(t)
	if out, err := c.Ctr("images", "import", archive).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	if out, err := c.Ctr("images", "ls", "-q").Output(); err != nil || !slices.Contains(strings.Fields(string(out)), ref) ||
		!slices.Contains(strings.Fields(string(out)), "xlb.dev/xlb:latest") {
		t.Fatalf("ctr images ls: %v: %q, want %s and xlb.dev/xlb:latest (deploy/agent.yaml's)", err, out, ref)
	}
	pfx := netlab.Prefix()
	out, err := c.Ctr("run", "--rm", ref, pfx+"-version", "/usr/bin/xlb", "version").CombinedOutput()
	if err != nil {
		t.Fatalf("xlb version in the image: %v\n%s", err, out)
	}
	t.Logf("xlb version in the image:\n%s", out)
	for _, want := range []string{"xlb " + ver + "\n", "CGO_ENABLED=0", "-trimpath=true", "linux/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("xlb version in the image lacks %q", want)
		}
	}

	root, err := socklb.RootCgroup()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	testAgentE2E(t, func(args []string) *exec.Cmd {
		n++
		// As deploy/agent.yaml: the host's cgroup root at /host/cgroup, its bpffs and netns
		// directory where they are.
		run := []string{"run", "--rm", "--privileged", "--net-host",
			"--mount", fmt.Sprintf("type=bind,src=%s,dst=/host/cgroup,options=rbind:rw", root)}
		for _, d := range []string{"/sys/fs/bpf", "/run/netns"} {
			run = append(run, "--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,options=rbind:rw", d, d))
		}
		args = slices.Clone(args)
		if i := slices.Index(args, "--cgroup"); i >= 0 && i+1 < len(args) {
			rel, err := filepath.Rel(root, args[i+1])
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Fatalf("the agent's cgroup %s is not under the root %s", args[i+1], root)
			}
			args[i+1] = filepath.Join("/host/cgroup", rel)
		}
		if i := slices.Index(args, "--kubeconfig"); i >= 0 && i+1 < len(args) {
			d := filepath.Dir(args[i+1])
			run = append(run, "--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,options=rbind:ro", d, d))
		}
		run = append(run, ref, fmt.Sprintf("%s-agent-%d", pfx, n), "/usr/bin/xlb")
		return c.Ctr(append(run, args...)...)
	})
}
