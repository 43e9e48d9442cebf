// Package debpkg builds xlb's Debian package for appliance gateways with dpkg-deb: /usr/bin/xlb
// (the static binary), the systemd unit (deploy/deb/xlb.service), /etc/xlb/xlb.yaml as a
// conffile (deploy/xlb.example.yaml: an upgrade never overwrites the operator's edits), a man
// page made from the binary's own --help (so the two match), and the copyright file. The
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
	help, err := exec.Command(o.Binary, "--help").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --help: %w", o.Binary, err)
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
		"usr/share/man/man8/xlb.8.gz":    {manPage(string(help), version), 0o644},
		"usr/share/doc/xlb/changelog.gz": {gz([]byte("xlb (" + version + ") stable; urgency=medium\n\n  * Built from " + o.Version + ".\n\n -- xlb developers <dev@xlb.dev>  " + time.Unix(0, 0).UTC().Format(time.RFC1123Z) + "\n")), 0o644},
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

// manPage is xlb(8): its --help as the synopsis and description, gzipped.
func manPage(help, version string) []byte {
	esc := strings.NewReplacer(`\`, `\\`, "\n.", "\n\\&.", "\n'", "\n\\&'")
	var b strings.Builder
	fmt.Fprintf(&b, ".TH XLB 8 \"\" \"xlb %s\" \"System Administration\"\n", version)
	b.WriteString(".SH NAME\nxlb \\- XDP load balancer appliance and node agent\n")
	b.WriteString(".SH SYNOPSIS AND DESCRIPTION\n.nf\n")
	b.WriteString(esc.Replace("\n" + strings.TrimRight(help, "\n"))[1:])
	b.WriteString("\n.fi\n.SH FILES\n/etc/xlb/xlb.yaml (the configuration), /lib/systemd/system/xlb.service,\n/sys/fs/bpf/xlb (the pinned datapath)\n")
	b.WriteString(".SH SEE ALSO\nhttps://github.com/xlb-dev/xlb (README.md, docs/)\n")
	return gz([]byte(b.String()))
}

// gz compresses b reproducibly (no name, no time).
func gz(b []byte) []byte {
	var out strings.Builder
	w, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	return []byte(out.String())
}
