// SPDX-License-Identifier: Apache-2.0
package ociimage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// fakeXLB is a stand-in binary: a script that answers `version --json` as xlb does.
const fakeXLB = `#!/bin/sh
echo '{"version":"v1.2.3","commit":"0123456789abcdef","commitTime":"2026-11-30T10:00:00Z","platform":"linux/amd64"}'
`

// TestBuild: the image holds the binary at /usr/bin/xlb and nothing else, is labelled with its
// version and commit, is named name:version, and is reproducible (two builds, one digest).
func TestBuild(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "xlb")
	if err := os.WriteFile(bin, []byte(fakeXLB), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	ref, d1, err := Build(bin, a, "xlb.dev/xlb")
	if err != nil {
		t.Fatal(err)
	}
	_, d2, err := Build(bin, b, "xlb.dev/xlb")
	if err != nil {
		t.Fatal(err)
	}
	if ref != "xlb.dev/xlb:v1.2.3" || d1 != d2 {
		t.Errorf("ref %s, digests %s and %s: want xlb.dev/xlb:v1.2.3, equal", ref, d1, d2)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if string(ab) != string(bb) {
		t.Error("two builds of one binary gave different archives")
	}

	// Read it back: untar into a layout and open the image.
	lay := filepath.Join(dir, "layout")
	if err := untar(a, lay); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Image(d1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || cf.Config.Labels["org.opencontainers.image.revision"] != "0123456789abcdef" ||
		cf.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)" ||
		cf.Config.Entrypoint[0] != "/usr/bin/xlb" || cf.Architecture != "amd64" || cf.Created.Format("2006-01-02") != "2026-11-30" {
		t.Errorf("config: %+v", cf)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v %v", len(layers), err)
	}
	files, err := layerFiles(layers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files["usr/bin/xlb"] != fakeXLB {
		t.Errorf("layer files %v: want usr/, usr/bin/ and usr/bin/xlb only", keys(files))
	}
}
