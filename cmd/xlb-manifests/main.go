// SPDX-License-Identifier: Apache-2.0

// Command xlb-manifests renders the raw manifests deploy/agent.yaml and deploy/rbac.yaml from
// the Helm chart deploy/helm/xlb with helm template (the chart's default values), so that the
// two never drift (make manifests; internal/helmtest's TestManifests checks them).
//
//	xlb-manifests [--repo DIR]
//
// helm is the one make helm-bin builds (internal/helmtest/helmbin/build.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/xlb-dev/xlb/internal/helmtest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb-manifests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", "", "the repository's top `directory` (default: found from the working directory)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := write(ctx, *repo); err != nil {
		fmt.Fprintf(stderr, "xlb-manifests: %v\n", err)
		return 1
	}
	return 0
}

func write(ctx context.Context, repo string) error {
	if repo == "" {
		r, err := helmtest.RepoRoot()
		if err != nil {
			return err
		}
		repo = r
	}
	h, err := helmtest.Find()
	if err != nil {
		return err
	}
	if err := helmtest.WriteManifests(ctx, h, repo); err != nil {
		return err
	}
	for _, m := range helmtest.ManifestList() {
		fmt.Printf("wrote %s\n", m.Path)
	}
	return nil
}
