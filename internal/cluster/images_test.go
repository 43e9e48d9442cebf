// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestImageTools unpacks the test images' tools into a directory and runs, chrooted there with
// /proc mounted as in a container, the commands the e2e specs run in agnhost Pods against an
// HTTP server on loopback: the shell (dash: busybox's would run its own nc and wget applets over
// the PATH's), GNU wget with the timeout every spec passes (bookworm's busybox wget dies of
// SIGSEGV with -T), curl and OpenBSD nc, each with the libraries it loads.
func TestImageTools(t *testing.T) {
	netlab.RequireRoot(t, "chroot")
	files, err := toolFiles()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for name, e := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if e.Link != "" {
			if err := os.Symlink(e.Link, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if e.Mode != 0 {
			mode = os.FileMode(e.Mode)
		}
		if err := os.WriteFile(p, e.Data, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	// A server that accepts and never answers: wget -T gives up after one try, as busybox's
	// (which the specs expect to fail fast against a blocked VIP).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 100)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { silent.Close() })
	addr := l.Addr().String()
	host, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct{ cmd, want string }{
		{`wget -T 5 -qO- "http://` + addr + `/"`, "hello"},
		{`wget -T 5 -qO- "` + addr + `"`, "hello"},
		{`curl -s --max-time 5 http://` + addr + `/`, "hello"},
		{`echo | nc -v -t -w 2 ` + host + ` ` + port + ` 2>&1`, "succeeded"},
	} {
		// /proc mounted as in a container: busybox's shell runs its own applets over the PATH's
		// programs only when it finds itself there.
		cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(root, "proc"),
			"chroot", root, "/bin/sh", "-c", tc.cmd)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %q, %v; want %q", tc.cmd, out, err, tc.want)
		}
	}
	cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(root, "proc"),
		"chroot", root, "/bin/sh", "-c", "wget -T 1 -qO- http://"+silent.Addr().String()+"/")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("wget of a server that never answers succeeded: %q", out)
	}
	silent.Close()
	if n := len(accepted); n != 1 {
		t.Errorf("wget -T 1 of a server that never answers connected %d times, want once", n)
	}
	for len(accepted) > 0 {
		(<-accepted).Close()
	}
}
