// SPDX-License-Identifier: Apache-2.0
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one file of an image's single layer: a regular file (Data, Mode) or, with Link
// set, a symbolic link to Link.
type Entry struct {
	Data []byte
	Mode int64
	Link string
}

// Spec describes an image BuildFiles writes: one layer of Files (path without a leading
// slash → entry), the entrypoint and default arguments, and the names it is imported under.
type Spec struct {
	Refs       []string
	Files      map[string]Entry
	Entrypoint []string
	Cmd        []string
}

// BuildFiles writes the image of spec to out (an OCI image layout in a tar archive, what
// `ctr images import` takes) with every timestamp at the Unix epoch, so the same files give
// the same digest, and returns the manifest digest.
func BuildFiles(spec Spec, out string) (v1.Hash, error) {
	if len(spec.Refs) == 0 {
		return v1.Hash{}, fmt.Errorf("image for %s: no name", out)
	}
	created := time.Unix(0, 0).UTC()
	layerTar, err := entryTar(spec.Files, created)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image %s: %w", spec.Refs[0], err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer}); err != nil {
		return v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "xlb-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	for _, r := range spec.Refs {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": r,
			"io.containerd.image.name":          r,
		})); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := tarDir(dir, out, created); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// entryTar is a tar of files and the directories above them, in a fixed order, owned by root.
func entryTar(files map[string]Entry, t time.Time) ([]byte, error) {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	dirs := map[string]bool{}
	names := make([]string, 0, len(files))
	for n := range files {
		if n == "" || path.IsAbs(n) || path.Clean(n) != n || n == ".." || strings.HasPrefix(n, "../") {
			return nil, fmt.Errorf("file name %q: want a clean relative path", n)
		}
		names = append(names, n)
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		if _, ok := files[d]; ok {
			return nil, fmt.Errorf("%q is both a file and a directory", d)
		}
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
		e := files[n]
		h := &tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: e.Mode, Size: int64(len(e.Data)), ModTime: t, Format: tar.FormatPAX}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.Link != "" {
			h.Typeflag, h.Linkname, h.Size, h.Mode = tar.TypeSymlink, e.Link, 0, 0o777
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if e.Link == "" {
			if _, err := w.Write(e.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
