// SPDX-License-Identifier: Apache-2.0

// Package vmtest boots real Linux kernels under QEMU (TCG: no KVM needed) with a small
// initramfs holding test binaries, and reads their results back from the serial console. It is
// how xlb proves its BPF programs on the kernels its users run (make kernel-matrix).
package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Kernel is one Debian kernel: the suite whose linux-image-amd64 names it.
type Kernel struct {
	Name  string // short name in tables and flags, e.g. "5.10"
	Suite string // Debian suite, e.g. "bullseye"
}

// Kernels are the kernels the matrix boots, oldest first: Debian 11, 12 and 13's own kernels and
// the newest 7.x in Debian's archive.
var Kernels = []Kernel{
	{Name: "5.10", Suite: "bullseye"},
	{Name: "6.1", Suite: "bookworm"},
	{Name: "6.12", Suite: "trixie"},
	{Name: "7.x", Suite: "trixie-backports"},
}

// DefaultCache is where fetched kernels are kept between runs.
const DefaultCache = "/var/cache/xlb/kernels"

// Fetched is a kernel on disk: its image and the modules the guest loads.
type Fetched struct {
	Kernel
	Release string // uname -r, e.g. "6.1.0-41-amd64"
	Image   string // path of vmlinuz
	Modules string // the lib/modules/<release> directory
}

// Modules the guest inserts, in order (a module's dependencies before it), by file name stem.
var guestModules = []string{"veth", "sch_ingress", "cls_bpf", "act_bpf", "sch_netem", "dummy"}

// Fetch returns k from the cache, downloading and extracting its linux-image package with apt
// (from a private sources list and lists directory: the host's apt sources are not touched).
func Fetch(ctx context.Context, cache string, k Kernel) (*Fetched, error) {
	aptDir := filepath.Join(cache, "apt", k.Suite)
	for _, d := range []string{"lists/partial", "archives/partial", "debs"} {
		if err := os.MkdirAll(filepath.Join(aptDir, d), 0o755); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
	}
	src := filepath.Join(aptDir, "sources.list")
	line := fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n", k.Suite)
	if err := os.WriteFile(src, []byte(line), 0o644); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + src,
		"-o", "Dir::Etc::SourceParts=/nonexistent",
		"-o", "Dir::State::Lists=" + filepath.Join(aptDir, "lists"),
		"-o", "Dir::Cache=" + aptDir,
		"-o", "Dir::State::status=/dev/null",
		"-o", "APT::Get::List-Cleanup=0",
		"-o", "Debug::NoLocking=1",
	}
	run := func(dir, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("kernel %s: %s %s: %w\n%s", k.Name, name, strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	// The suite's package lists are refreshed once a day: a cached kernel boots offline.
	stamp := filepath.Join(aptDir, "updated")
	if st, err := os.Stat(stamp); err != nil || time.Since(st.ModTime()) > 24*time.Hour {
		if _, err := run(aptDir, "apt-get", append(opts, "-q", "update")...); err != nil {
			return nil, err
		}
		os.WriteFile(stamp, nil, 0o644)
	}
	// linux-image-amd64 is a metapackage depending on the concrete linux-image-<release>.
	out, err := run(aptDir, "apt-cache", append(opts, "depends", "linux-image-amd64")...)
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-amd64)(-unsigned)?\b`).FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("kernel %s: no linux-image dependency in %q", k.Name, out)
	}
	pkg := m[1]
	if m[2] != "" {
		pkg += m[2]
	}
	release := strings.TrimPrefix(strings.TrimSuffix(pkg, "-unsigned"), "linux-image-")
	dir := filepath.Join(cache, release)
	f := &Fetched{Kernel: k, Release: release, Image: filepath.Join(dir, "boot", "vmlinuz-"+release),
		Modules: filepath.Join(dir, "lib", "modules", release)}
	if _, err := os.Stat(filepath.Join(dir, "stamp")); err == nil {
		return f, nil
	}
	debs := filepath.Join(aptDir, "debs")
	os.RemoveAll(debs)
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	// Newer kernels split linux-image-<release> into linux-binary-<release> (the image) and
	// linux-modules-<release>: fetch those too when the image package depends on them.
	want := []string{pkg}
	if out, err := run(aptDir, "apt-cache", append(opts, "depends", pkg)...); err == nil {
		for _, p := range regexp.MustCompile(`Depends: (linux-(?:binary|modules)-[^\s]+)`).FindAllStringSubmatch(out, -1) {
			want = append(want, p[1])
		}
	}
	if _, err := run(debs, "apt-get", append(append(opts, "-q", "download"), want...)...); err != nil {
		return nil, err
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	// Only the image and the modules the guest loads: the whole package unpacks to hundreds of MB.
	// Debian 13 and later ship them under /usr (merged /usr).
	members := []string{"--wildcards", "*/vmlinuz-" + release, "*/modules/" + release + "/vmlinuz"}
	for _, mod := range guestModules {
		members = append(members, fmt.Sprintf("*/%s.ko*", mod))
	}
	script := fmt.Sprintf("for d in %q/*.deb; do dpkg-deb --fsys-tarfile \"$d\" | tar -x -C %q %s 2>/dev/null; done; "+
		"true",
		debs, tmp, shellJoin(members))
	if _, err := run(debs, "sh", "-c", script); err != nil {
		return nil, err
	}
	// Wherever the package put them, the image goes to boot/ and the modules to lib/modules/.
	if err := normalise(tmp, release); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "stamp"), []byte(pkg+"\n"), 0o644); err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	os.RemoveAll(debs)
	return f, nil
}

// normalise moves the extracted vmlinuz to boot/ and the modules to lib/modules/<release>/kernel/
// (flat: the guest inserts them by name), failing when the image is missing.
func normalise(root, release string) error {
	img := filepath.Join(root, "boot", "vmlinuz-"+release)
	modDir := filepath.Join(root, "lib", "modules", release, "kernel")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return err
	}
	found := false
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		base := d.Name()
		switch {
		case base == "vmlinuz-"+release || (base == "vmlinuz" && filepath.Base(filepath.Dir(p)) == release):
			found = true
			if p != img {
				return os.Rename(p, img)
			}
		case strings.Contains(base, ".ko") && filepath.Dir(p) != modDir:
			return os.Rename(p, filepath.Join(modDir, base))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no vmlinuz-%s in the packages", release)
	}
	return nil
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "--") {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
