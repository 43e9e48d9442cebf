// SPDX-License-Identifier: Apache-2.0

// Command xlb-image builds xlb's container image (package internal/ociimage) from a static
// xlb binary into an OCI archive:
//
//	xlb-image --binary bin/xlb-static --out bin/xlb-image.tar [--name xlb.dev/xlb]
//
// `make image` builds the binary (CGO_ENABLED=0, -trimpath, the version from git describe) and
// runs it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/xlb-dev/xlb/internal/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("binary", "bin/xlb-static", "the static xlb `binary` to package")
	out := fs.String("out", "bin/xlb-image.tar", "the OCI archive to write")
	name := fs.String("name", "xlb.dev/xlb", "the image's name (its tag is the version)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ref, digest, err := ociimage.Build(*bin, *out, *name)
	if err != nil {
		fmt.Fprintf(stderr, "xlb-image: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s %s -> %s\n", ref, digest, *out)
	return 0
}
