// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDown proves that Down (`make lab-down`) removes what a killed lab process left behind and
// nothing else: a child process builds a site (1 gateway running xlb, 1 node, 1 pod) and is
// killed with SIGKILL; a stray process whose command line names that site's config is running
// too, and two that look like the site's etcd and kube-apiserver (Kubernetes mode). Down removes
// the stray processes, the site's 6 namespaces, its pins and its state
// directory, and leaves this process's own running site untouched.
func TestDown(t *testing.T) {
	live := NewT(t, Options{NoXLB: true, Gateways: 1, Nodes: 1, Pods: 1})

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChild+"=1", "XLB_BIN="+xlbBin)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "PREFIX "); ok {
				lines <- p
			}
		}
		close(lines)
	}()
	var prefix string
	select {
	case p, ok := <-lines:
		if !ok {
			_ = child.Wait()
			t.Fatalf("the child exited without building its site: %s", stderr.String())
		}
		prefix = p
	case <-time.After(60 * time.Second):
		t.Fatalf("the child built no site within 60s: %s", stderr.String())
	}
	siteDir := filepath.Join(DefaultStateDir, prefix)
	// Whatever happens, remove the child's site at the end.
	t.Cleanup(func() { _ = Down(DefaultStateDir, false, nil) })

	stray := exec.Command("sh", "-c", "read x", "run", "--config", filepath.Join(siteDir, "g1.yaml"))
	strayIn, err := stray.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer strayIn.Close()
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strayDone := make(chan error, 1)
	go func() { strayDone <- stray.Wait() }()
	// Kubernetes mode's etcd and kube-apiserver, as they show in /proc (argv[0] and the flag
	// naming the site's directory).
	var cpDone []chan error
	for _, args := range [][]string{
		{"etcd", "-c", "read x", "--data-dir", filepath.Join(siteDir, "kube", "etcd")},
		{"kube-apiserver", "-c", "read x", "--cert-dir", filepath.Join(siteDir, "kube", "certs")},
	} {
		sh, err := exec.LookPath("sh")
		if err != nil {
			t.Fatal(err)
		}
		p := &exec.Cmd{Path: sh, Args: args}
		in, err := p.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		cpDone = append(cpDone, done)
	}

	_ = child.Process.Kill()
	_ = child.Wait()
	killed = true

	left := func(p string) (ns []string, pins []string, dir bool) {
		b, _ := exec.Command("ip", "netns", "list").Output()
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, p+"-") {
				ns = append(ns, strings.Fields(l)[0])
			}
		}
		pins, _ = filepath.Glob(filepath.Join("/sys/fs/bpf", p+"-*"))
		_, err := os.Stat(filepath.Join(DefaultStateDir, p))
		return ns, pins, err == nil
	}
	ns, pins, dir := left(prefix)
	t.Logf("the killed lab left %d namespaces, pins %v, state directory %v", len(ns), pins, dir)
	// The gateway's pins and, in the DSR mode, the node agent's.
	wantPins := 1
	if !EnvReturnPath() {
		wantPins = 2
	}
	if len(ns) != 6 || len(pins) != wantPins || !dir {
		t.Fatalf("the killed lab should have left 6 namespaces, %d pin directories and its state: %v %v %v", wantPins, ns, pins, dir)
	}

	var log bytes.Buffer
	if err := Down(DefaultStateDir, false, &log); err != nil {
		t.Errorf("Down: %v", err)
	}
	t.Logf("Down:\n%s", log.String())
	if ns, pins, dir := left(prefix); len(ns) != 0 || len(pins) != 0 || dir {
		t.Errorf("after Down: namespaces %v, pins %v, state directory %v", ns, pins, dir)
	}
	select {
	case err := <-strayDone:
		if err == nil {
			t.Errorf("the stray process exited by itself, not killed")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the stray process still runs after Down")
		_ = stray.Process.Kill()
	}
	for i, done := range cpDone {
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("stray control plane process %d exited by itself, not killed", i)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("stray control plane process %d still runs after Down", i)
		}
	}
	if ns, _, dir := left(live.Prefix); len(ns) != 6 || !dir {
		t.Errorf("Down removed parts of this process's running site %s: %d namespaces left, state directory %v", live.Prefix, len(ns), dir)
	}
}
