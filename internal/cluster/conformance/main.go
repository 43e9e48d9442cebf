// SPDX-License-Identifier: Apache-2.0

// Command conformance brings up the real cluster (internal/cluster) with an xlb gateway as its
// LoadBalancer implementation (defaultClass: the specs create Services without a class), runs
// upstream's e2e.test specs from the client namespace behind the gateway, prints each spec's
// result and, with -out, writes them as a Markdown table. Run as root, after make cluster-bins.
//
//	go run ./internal/cluster/conformance -focus '\[sig-network\] LoadBalancers' -out /tmp/lb.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xlb-dev/xlb/internal/cluster"
	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/lab"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run() error {
	focus := flag.String("focus", `\[sig-network\] LoadBalancers`, "ginkgo focus regexp")
	skip := flag.String("skip", "", "ginkgo skip regexp")
	nodes := flag.Int("nodes", 2, "kubelets")
	keep := flag.Bool("keep", false, "keep the cluster's directory (logs) after the run")
	xlb := flag.String("xlb", "", "xlb binary (default: built from this module)")
	out := flag.String("out", "", "write the results as a Markdown table to this file")
	timeout := flag.Duration("timeout", 2*time.Hour, "bound of the whole run")
	verbose := flag.Bool("v", false, "copy e2e.test's output to stderr")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout+10*time.Minute)
	defer cancel()
	if *xlb == "" {
		dir, err := os.MkdirTemp("", "xlb-conformance-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if *xlb, err = lab.Build(dir); err != nil {
			return err
		}
	}
	deploy, err := lab.FindDeployDir()
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	c, err := cluster.Start(ctx, cluster.Options{Nodes: *nodes, Logf: logf, KeepDir: *keep})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			logf("teardown: %v", err)
		}
	}()
	logf("cluster up in %s (dir %s)", c.StartDur.Round(time.Second), c.Dir())
	g, err := c.StartGateway(ctx, cluster.GatewayOptions{XLB: *xlb, DeployDir: deploy, DefaultClass: true})
	if err != nil {
		return err
	}
	opts := cluster.E2EOptions{Focus: *focus, Skip: *skip, Timeout: *timeout}
	if *verbose {
		opts.Output = os.Stderr
	}
	began := time.Now()
	results, err := c.RunE2E(ctx, g, opts)
	if err != nil {
		return err
	}
	logf("e2e run took %s", time.Since(began).Round(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s: %s; %d nodes; focus `%s`; %s.\n\n", time.Now().UTC().Format("2006-01-02"),
		versions(), *nodes, *focus, summary(results))
	b.WriteString("| spec | mode | family | result | seconds | reason |\n|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | returnPath | IPv4 | %s | %.0f | %s |\n", mdEscape(r.Name), r.Result, r.Seconds, mdEscape(r.Message))
	}
	fmt.Print(b.String())
	logf("%s", summary(results))
	if *out != "" {
		return os.WriteFile(*out, []byte(b.String()), 0o644)
	}
	return nil
}

// versions names what ran: xlb (this checkout), Kubernetes, etcd, containerd, runc, the kernel.
func versions() string {
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return "?"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	return fmt.Sprintf("xlb %s, Kubernetes %s (etcd %s), %s, %s, kernel %s", first("git", "describe", "--always", "--dirty"),
		kubetest.KubeVersion, kubetest.EtcdVersion,
		"containerd "+strings.TrimPrefix(first(filepath.Join(cluster.ContainerdDir, "containerd"), "--version"), "containerd github.com/containerd/containerd/v2 "),
		first("runc", "--version"), first("uname", "-r"))
}

// summary counts the results.
func summary(rs []cluster.SpecResult) string {
	n := map[string]int{}
	for _, r := range rs {
		n[r.Result]++
	}
	return fmt.Sprintf("%d specs: %d passed, %d failed, %d skipped", len(rs), n["passed"], n["failed"]+n["errored"]+n["timedout"]+n["panicked"], n["skipped"])
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
