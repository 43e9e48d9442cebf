// SPDX-License-Identifier: Apache-2.0

// Package ociimage builds xlb's container image from a static xlb binary, without a
// container daemon: one layer holding /usr/bin/xlb (nothing else: xlb needs no libc, no shell,
// no CA certificates), entrypoint /usr/bin/xlb, labelled with the binary's own `xlb version
// --json` (org.opencontainers.image.version, .revision, .created), reproducible (every
// timestamp is the commit's time: the same binary gives the same digest), written as an OCI
// image layout in a tar archive, which `ctr images import`, `podman load` and `skopeo copy
// oci-archive:` take.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Licenses is the SPDX expression of the image's licenses (its label
// org.opencontainers.image.licenses): xlb is Apache-2.0, the BPF programs it loads are
// GPL-2.0-only OR BSD-2-Clause.
const Licenses = "Apache-2.0 AND (GPL-2.0-only OR BSD-2-Clause)"

// buildInfo is what the image takes from `xlb version --json`.
type buildInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit"`
	CommitTime string `json:"commitTime"`
	Modified   bool   `json:"modified"`
	Platform   string `json:"platform"`
}

// Build writes the image of the static xlb binary bin to out, an OCI image layout in a tar
// archive naming it name:version and name:latest, and returns the first reference and the
// manifest digest.
func Build(bin, out, name string) (string, v1.Hash, error) {
	var info buildInfo
	vout, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("%s version --json: %w", bin, err)
	}
	if err := json.Unmarshal(vout, &info); err != nil {
		return "", v1.Hash{}, fmt.Errorf("%s version --json: %w", bin, err)
	}
	if info.Platform != "linux/amd64" && info.Platform != "linux/arm64" {
		return "", v1.Hash{}, fmt.Errorf("%s is built for %s: want linux/amd64 or linux/arm64", bin, info.Platform)
	}
	created := time.Unix(0, 0).UTC()
	if t, err := time.Parse(time.RFC3339, info.CommitTime); err == nil {
		created = t.UTC()
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", v1.Hash{}, err
	}
	layerTar, err := fileTar(map[string][]byte{"usr/bin/xlb": data}, created)
	if err != nil {
		return "", v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", v1.Hash{}, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "xlb-image: /usr/bin/xlb", Comment: "xlb " + info.Version}})
	if err != nil {
		return "", v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", filepath.Base(info.Platform)
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = []string{"/usr/bin/xlb"}
	cf.Config.Cmd = []string{"--help"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "xlb",
		"org.opencontainers.image.version":  info.Version,
		"org.opencontainers.image.revision": info.Commit,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
		"org.opencontainers.image.source":   "https://github.com/xlb-dev/xlb",
		// The binary's licenses: Apache-2.0, and the BPF programs built into it dual-licensed.
		"org.opencontainers.image.licenses": Licenses,
		"dev.xlb.modified":                  fmt.Sprint(info.Modified),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", v1.Hash{}, err
	}
	ref := name + ":" + info.Version
	dir, err := os.MkdirTemp("", "xlb-image-")
	if err != nil {
		return "", v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", v1.Hash{}, err
	}
	// Two names for the one image: name:version, and name:latest for the manifests in deploy/.
	for _, r := range []string{ref, name + ":latest"} {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": r, // ctr names the imported image after it
			"io.containerd.image.name":          r,
		})); err != nil {
			return "", v1.Hash{}, err
		}
	}
	if err := tarDir(dir, out, created); err != nil {
		return "", v1.Hash{}, err
	}
	return ref, digest, nil
}

// fileTar is a tar of files (path → content, mode 0755, owned by root, mtime t) and the
// directories above them, in a fixed order.
func fileTar(files map[string][]byte, t time.Time) ([]byte, error) {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	dirs := map[string]bool{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
		for d := filepath.Dir(n); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	sort.Strings(names)
	for _, d := range ds {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: t, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(files[n])), ModTime: t, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := w.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// tarDir archives the OCI layout in dir to out, in a fixed order with fixed times.
func tarDir(dir, out string, t time.Time) error {
	var paths []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: t, Mode: 0o644, Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := w.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := w.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}
