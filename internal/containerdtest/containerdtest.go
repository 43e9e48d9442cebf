// SPDX-License-Identifier: Apache-2.0

// Package containerdtest runs a private containerd for tests (Debian's containerd and runc):
// its own root, state, sockets and namespace under the test's temporary directory, nothing
// shared with a containerd the machine may run, killed and removed when the test ends; Ctr
// drives it with ctr.
package containerdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Namespace is the containerd namespace the tests' images and containers live in.
const Namespace = "xlbtest"

// Containerd is a running private containerd.
type Containerd struct {
	// Socket is its gRPC address.
	Socket string
	dir    string
}

// Start starts containerd and waits until ctr reaches it; the test fails when containerd or
// runc is missing (make deps installs them) or containerd does not come up within 20 s.
func Start(t testing.TB) *Containerd {
	t.Helper()
	for _, bin := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("needs %s (make deps installs containerd and runc): %v", bin, err)
		}
	}
	// Short: the sockets' paths must fit in sun_path.
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{Socket: filepath.Join(dir, "c.sock"), dir: dir}
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Socket, c.Socket+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Containers first (their shims outlive containerd), then containerd.
		if out, err := c.Ctr("tasks", "ls", "-q").Output(); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_ = c.Ctr("tasks", "kill", "-s", "SIGKILL", id).Run()
				_ = c.Ctr("tasks", "rm", "-f", id).Run()
			}
		}
		if out, err := c.Ctr("containers", "ls", "-q").Output(); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_ = c.Ctr("containers", "rm", id).Run()
			}
		}
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd.log (tail):\n%s", tail(string(b), 30))
		}
		// Snapshots may still be mounted if a container was left: unmount before removing.
		_ = exec.Command("sh", "-c", "grep -o '"+dir+"[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l").Run()
		_ = os.RemoveAll(dir)
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.Ctr("version").Run(); err == nil {
			return c
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("containerd exited at start:\n%s", tail(string(b), 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd not up within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctr returns a ctr command with args against c, in Namespace.
func (c *Containerd) Ctr(args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"--address", c.Socket, "--namespace", Namespace}, args...)...)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
