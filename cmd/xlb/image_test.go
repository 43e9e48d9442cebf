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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/internal/containerdtest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/internal/ociimage"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// TestImage builds xlb's image as `make image` does (a static binary, then internal/ociimage),
// imports it into a private containerd with ctr, runs `xlb version` in it (the version and the
// build settings the binary was linked with), then runs the node agent from it as
// deploy/agent.yaml's DaemonSet does (not privileged: the runtime's default capabilities
// dropped and only the container's added, no new privileges, a read-only root; the host's
// network, its bpffs read-write, its cgroup tree and netns directory read-only, as the
// container mounts them) through TestAgentE2E's whole scenario: Services balanced at a
// namespace's sockets, the takeover refused, UDP sockets reaped in a Pod's namespace, the agent
// stopped and restarted.
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
	sec := manifestAgent(t, filepath.Join(filepath.Dir(file), "..", "..", "deploy", "agent.yaml"), root)
	t.Logf("deploy/agent.yaml's agent: ctr run %q", sec)
	n := 0
	testAgentE2E(t, func(args []string) *exec.Cmd {
		n++
		run := append([]string{"run", "--rm", "--net-host"}, sec...)
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

// containerdDefaultCaps are the capabilities containerd gives a container that is not
// privileged (its default spec): the ones a container that drops ALL must lose.
var containerdDefaultCaps = []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

// manifestAgent reads the agent DaemonSet of the manifest file and returns the ctr run flags
// that give a container its securityContext and host-path mounts (the host's cgroup tree
// being cgroupRoot), failing on anything the translation does not cover.
func manifestAgent(t *testing.T, file, cgroupRoot string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for _, doc := range strings.Split(string(data), "\n---") {
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &d); err == nil && d.Kind == "DaemonSet" && d.Name == "xlb-agent" {
			ds = &d
		}
	}
	if ds == nil {
		t.Fatalf("%s has no DaemonSet xlb-agent", file)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].SecurityContext == nil || spec.Containers[0].SecurityContext.Capabilities == nil {
		t.Fatalf("the agent's containers: %+v", spec.Containers)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	var out []string
	switch {
	case sc.Privileged != nil && *sc.Privileged:
		t.Fatal("the agent is privileged")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		out = append(out, "--allow-new-privs")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		out = append(out, "--read-only")
	}
	var added []string
	for _, a := range sc.Capabilities.Add {
		added = append(added, string(a))
		out = append(out, "--cap-add", "CAP_"+string(a))
	}
	if slices.Contains(sc.Capabilities.Drop, "ALL") {
		for _, d := range containerdDefaultCaps {
			if !slices.Contains(added, d) {
				out = append(out, "--cap-drop", "CAP_"+d)
			}
		}
	} else if len(sc.Capabilities.Drop) > 0 {
		t.Fatalf("the agent drops %v: not translated", sc.Capabilities.Drop)
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		src, ok := hostPaths[m.Name]
		if !ok {
			t.Fatalf("the agent mounts %s, not a host path", m.Name)
		}
		if src == "/sys/fs/cgroup" {
			src = cgroupRoot
		}
		opts := "rbind:rw"
		if m.ReadOnly {
			opts = "rbind:ro"
		}
		if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationHostToContainer {
			opts += ":rslave"
		}
		out = append(out, "--mount", fmt.Sprintf("type=bind,src=%s,dst=%s,options=%s", src, m.MountPath, opts))
	}
	return out
}
