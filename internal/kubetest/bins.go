// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// Versions of the binaries kubebins/build.sh builds; they must match build.sh and
// kubebins/go.mod.
const (
	// KubeVersion is the kube-apiserver version (k8s.io/kubernetes module version).
	KubeVersion = "v1.37.2"
	// EtcdVersion is the etcd version k8s.io/kubernetes pins.
	EtcdVersion = "v3.7.0"
)

// BinDirEnv names the environment variable that overrides DefaultBinDir.
const BinDirEnv = "XLB_KUBE_BIN_DIR"

// DefaultBinDir is where build.sh caches the binaries unless BinDirEnv says otherwise.
const DefaultBinDir = "/var/cache/xlb/kube-" + KubeVersion

// stampName is the file build.sh writes into the binary directory once both binaries are in.
const stampName = "stamp"

// Binaries are the paths of the two programs a control plane runs.
type Binaries struct {
	// APIServer is the kube-apiserver binary.
	APIServer string
	// Etcd is the etcd binary.
	Etcd string
}

// BinDir returns the directory the binaries are cached in: $XLB_KUBE_BIN_DIR, else
// DefaultBinDir.
func BinDir() string {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d
	}
	return DefaultBinDir
}

// wantStamp is the content of a complete cache's stamp file (the format build.sh writes).
func wantStamp() string {
	return "kube-apiserver " + KubeVersion + " etcd " + EtcdVersion
}

// FindBinaries returns the binaries in dir (BinDir() when empty). When they are missing it
// builds them with kubebins/build.sh, copying its progress to progress (nil: os.Stderr); that
// takes several minutes the first time. It fails, never skips, when they cannot be had.
func FindBinaries(ctx context.Context, dir string, progress io.Writer) (Binaries, error) {
	if dir == "" {
		dir = BinDir()
	}
	if progress == nil {
		progress = os.Stderr
	}
	bins := Binaries{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Etcd:      filepath.Join(dir, "etcd"),
	}
	if cached(dir) {
		return bins, nil
	}
	script, err := buildScript()
	if err != nil {
		return Binaries{}, fmt.Errorf("kube-apiserver %s is not in %s and cannot be built: %w", KubeVersion, dir, err)
	}
	fmt.Fprintf(progress, "kubetest: building kube-apiserver %s and etcd %s into %s with %s (several minutes the first time)\n",
		KubeVersion, EtcdVersion, dir, script)
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), BinDirEnv+"="+dir)
	cmd.Stdout, cmd.Stderr = progress, progress
	// The build runs in its own process group so that a cancelled ctx stops the compilers too;
	// it dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("build kube-apiserver %s and etcd %s with %s into %s: %w", KubeVersion, EtcdVersion, script, dir, err)
	}
	if !cached(dir) {
		return Binaries{}, fmt.Errorf("%s finished but %s has no %s stamp %q", script, dir, stampName, wantStamp())
	}
	return bins, nil
}

// cached reports whether dir holds a complete build of the wanted versions.
func cached(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, stampName))
	return err == nil && strings.TrimSpace(string(b)) == wantStamp()
}

// buildScript finds kubebins/build.sh: next to this source file when the package was built
// from a checkout, else in internal/kubetest/kubebins of the working directory or a parent.
func buildScript() (string, error) {
	var tried []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		p := filepath.Join(filepath.Dir(file), "kubebins", "build.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find build.sh: working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "internal", "kubetest", "kubebins", "build.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", errors.New("no kubebins/build.sh at " + strings.Join(tried, ", "))
}
