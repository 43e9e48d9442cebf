// SPDX-License-Identifier: Apache-2.0

// Package debpkg builds xlb's Debian package for appliance gateways with dpkg-deb: /usr/bin/xlb
// (the static binary), the systemd unit (deploy/deb/xlb.service), /etc/xlb/xlb.yaml as a
// conffile (deploy/xlb.example.yaml: an upgrade never overwrites the operator's edits), the man
// pages the binary writes from the definitions of its --help (xlb man), and the copyright file. The
// package does not start the daemon: its configuration names the site's interfaces and
// routers, which the operator writes first.
package debpkg

import (
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Options say what to package.
type Options struct {
	// Binary is the static xlb to install as /usr/bin/xlb.
	Binary string
	// Version is the package version: a tag (v1.2.3 → 1.2.3) or git describe's output (any
	// other string → 0.0~git.<it>, which sorts before every release).
	Version string
	// Arch is the Debian architecture (amd64, arm64).
	Arch string
	// Unit, Config and Copyright are the files to install as the systemd unit,
	// /etc/xlb/xlb.yaml and the copyright file.
	Unit, Config, Copyright string
	// Out is the .deb to write.
	Out string
}

// DebVersion turns xlb's version (git describe) into a Debian version.
func DebVersion(v string) string {
	if m := regexp.MustCompile(`^v?([0-9]+\.[0-9]+\.[0-9]+)(.*)$`).FindStringSubmatch(v); m != nil {
		return m[1] + strings.NewReplacer("-", "+", "_", "+").Replace(m[2])
	}
	clean := regexp.MustCompile(`[^A-Za-z0-9.+~]`).ReplaceAllString(v, ".")
	if clean == "" {
		clean = "devel"
	}
	return "0.0~git." + clean
}

// Build writes the package.
func Build(o Options) error {
	stage, err := os.MkdirTemp("", "xlb-deb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.Chmod(stage, 0o755); err != nil { // the package's "./"
		return err
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return err
	}
	mans, err := manPages(o.Binary)
	if err != nil {
		return err
	}
	unit, err := os.ReadFile(o.Unit)
	if err != nil {
		return err
	}
	conf, err := os.ReadFile(o.Config)
	if err != nil {
		return err
	}
	copyright, err := os.ReadFile(o.Copyright)
	if err != nil {
		return err
	}
	version := DebVersion(o.Version)
	control := fmt.Sprintf(`Package: xlb
Version: %s
Architecture: %s
Maintainer: xlb developers <dev@xlb.dev>
Section: net
Priority: optional
Depends: iproute2, procps
Recommends: nftables
Homepage: https://github.com/xlb-dev/xlb
Description: XDP load balancer appliance for bare-metal Kubernetes
 xlb balances VIPs over Pods with Maglev consistent hashing in an XDP program,
 announces them over BGP (with BFD) to the upstream routers, and, in Kubernetes
 mode, serves LoadBalancer Services of its class. This package is the appliance:
 /usr/bin/xlb, the xlb.service systemd unit and /etc/xlb/xlb.yaml to edit.
`, version, o.Arch)
	files := map[string]struct {
		data []byte
		mode os.FileMode
	}{
		"DEBIAN/control":                 {[]byte(control), 0o644},
		"DEBIAN/conffiles":               {[]byte("/etc/xlb/xlb.yaml\n"), 0o644},
		"usr/bin/xlb":                    {bin, 0o755},
		"lib/systemd/system/xlb.service": {unit, 0o644},
		"etc/xlb/xlb.yaml":               {conf, 0o644},
		"usr/share/doc/xlb/copyright":    {copyright, 0o644},
		"usr/share/doc/xlb/changelog.gz": {gz([]byte("xlb (" + version + ") stable; urgency=medium\n\n  * Built from " + o.Version + ".\n\n -- xlb developers <dev@xlb.dev>  " + time.Unix(0, 0).UTC().Format(time.RFC1123Z) + "\n")), 0o644},
	}
	for name, page := range mans {
		files["usr/share/man/man8/"+name+".gz"] = struct {
			data []byte
			mode os.FileMode
		}{gz(page), 0o644}
	}
	for p, f := range files {
		full := filepath.Join(stage, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(full, f.mode); err != nil {
			return err
		}
	}
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, o.Out)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb --build: %v: %s", err, out)
	}
	return nil
}

// manPages returns the binary's manual pages (section 8: xlb.8, xlb-run.8, ...) by name, as
// `xlb man` writes them from the same definitions as its --help.
func manPages(binary string) (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "xlb-man-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if out, err := exec.Command(binary, "man", "--dir", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s man: %w: %s", binary, err, out)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pages := map[string][]byte{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".8") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		pages[e.Name()] = b
	}
	if pages["xlb.8"] == nil {
		return nil, fmt.Errorf("%s man wrote no xlb.8", binary)
	}
	return pages, nil
}

// gz compresses b reproducibly (no name, no time).
func gz(b []byte) []byte {
	var out strings.Builder
	w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return []byte(out.String())
}
