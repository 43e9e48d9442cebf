// SPDX-License-Identifier: Apache-2.0

// Package helmtest runs helm on xlb's chart, deploy/helm/xlb: the helm binary that
// helmbin/build.sh builds from its Go module into a version-keyed cache (make helm-bin), the
// chart's rendering, and the raw manifests deploy/agent.yaml and deploy/rbac.yaml that are
// rendered from it (make manifests). Its tests lint the chart, render its value combinations
// and apply them to a real kube-apiserver (internal/kubetest).
package helmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// HelmVersion is the helm release helmbin/build.sh builds; it must match build.sh and
// helmbin/go.mod.
const HelmVersion = "v4.3.2"

// BinDirEnv names the environment variable that overrides DefaultBinDir.
const BinDirEnv = "XLB_HELM_BIN_DIR"

// DefaultBinDir is where build.sh caches helm unless BinDirEnv says otherwise.
const DefaultBinDir = "/var/cache/xlb/helm-" + HelmVersion

// MakeTarget is the make target that builds helm into BinDir.
const MakeTarget = "helm-bin"

// stampName is the file build.sh writes next to helm once the binary is in.
const stampName = "stamp"

// BinDir returns the directory helm is cached in: $XLB_HELM_BIN_DIR, else DefaultBinDir.
func BinDir() string {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	return DefaultBinDir
}

// Helm runs one helm binary.
type Helm struct {
	// Path is the helm binary.
	Path string
}

// Find returns the helm that build.sh put in BinDir. It does not build it: when it is missing
// the error says which make target does.
func Find() (Helm, error) {
	dir := BinDir()
	path := filepath.Join(dir, "helm")
	stamp, err := os.ReadFile(filepath.Join(dir, stampName))
	if err != nil || strings.TrimSpace(string(stamp)) != "helm "+HelmVersion {
		return Helm{}, fmt.Errorf("helm %s is not built in %s (no stamp %q): run `make %s` (internal/helmtest/helmbin/build.sh)",
			HelmVersion, dir, "helm "+HelmVersion, MakeTarget)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		return Helm{}, fmt.Errorf("helm %s: %s is missing or not executable: run `make %s`", HelmVersion, path, MakeTarget)
	}
	return Helm{Path: path}, nil
}

// Run runs helm with args and returns its standard output. helm gets an environment of its own
// (cache, config and data directories under a temporary directory, no kubeconfig) so that no
// repository index or plugin of the machine's user takes part. A failure's error holds helm's
// standard error.
func (h Helm) Run(ctx context.Context, args ...string) ([]byte, error) {
	home, err := os.MkdirTemp("", "xlb-helm-")
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, h.Path, args...)
	cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + home,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"KUBECONFIG=" + filepath.Join(home, "no-kubeconfig"),
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()+"\n"+stdout.String()))
	}
	return stdout.Bytes(), nil
}

// Render is one rendering of a chart with helm template.
type Render struct {
	// Chart is the chart's directory or package.
	Chart string
	// Release is the release name (default "xlb").
	Release string
	// Namespace is the release's namespace (default "xlb-system").
	Namespace string
	// ValuesFiles are passed with --values, in order.
	ValuesFiles []string
	// Set are passed with --set, in order (key=value).
	Set []string
	// IncludeCRDs renders the chart's crds/ too.
	IncludeCRDs bool
}

// Template renders r with helm template and returns the multi-document YAML.
func (h Helm) Template(ctx context.Context, r Render) ([]byte, error) {
	rel, ns := r.Release, r.Namespace
	if rel == "" {
		rel = "xlb"
	}
	if ns == "" {
		ns = "xlb-system"
	}
	args := []string{"template", rel, r.Chart, "--namespace", ns}
	if r.IncludeCRDs {
		args = append(args, "--include-crds")
	}
	for _, f := range r.ValuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range r.Set {
		args = append(args, "--set", s)
	}
	return h.Run(ctx, args...)
}

// RepoRoot returns the repository's top directory: the one holding deploy/helm/xlb, found
// from this source file (a checkout) or else from the working directory upwards.
func RepoRoot() (string, error) {
	var tried []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		d := filepath.Join(filepath.Dir(file), "..", "..")
		if isRepo(d) {
			return filepath.Clean(d), nil
		}
		tried = append(tried, d)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository: working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isRepo(d) {
			return d, nil
		}
		tried = append(tried, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", errors.New("find the repository: no deploy/helm/xlb/Chart.yaml in " + strings.Join(tried, ", "))
}

func isRepo(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ChartDir, "Chart.yaml"))
	return err == nil
}
