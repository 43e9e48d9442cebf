// SPDX-License-Identifier: Apache-2.0

// Command xlb-deb builds xlb's Debian package (package internal/debpkg) from a static xlb:
//
//	xlb-deb --binary bin/xlb-static --version $(git describe) --out bin/xlb.deb
//
// `make deb` builds the binary and runs it from the repository's root.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xlb-dev/xlb/internal/debpkg"
)

func main() {
	fs := flag.NewFlagSet("xlb-deb", flag.ExitOnError)
	var o debpkg.Options
	fs.StringVar(&o.Binary, "binary", "bin/xlb-static", "the static xlb `binary`")
	fs.StringVar(&o.Version, "version", "devel", "xlb's version (git describe)")
	fs.StringVar(&o.Arch, "arch", "amd64", "the Debian architecture")
	fs.StringVar(&o.Unit, "unit", "deploy/deb/xlb.service", "the systemd unit")
	fs.StringVar(&o.Config, "config", "deploy/xlb.example.yaml", "the file installed as /etc/xlb/xlb.yaml")
	fs.StringVar(&o.Copyright, "copyright", "deploy/deb/copyright", "the copyright file")
	fs.StringVar(&o.Out, "out", "bin/xlb.deb", "the package to write")
	_ = fs.Parse(os.Args[1:])
	if err := debpkg.Build(o); err != nil {
		fmt.Fprintf(os.Stderr, "xlb-deb: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("xlb %s (%s) -> %s\n", debpkg.DebVersion(o.Version), o.Arch, o.Out)
}
