// SPDX-License-Identifier: Apache-2.0
package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
	"time"
)

// TestEntryTar checks the layer of BuildFiles: parent directories first, symlinks as links,
// file modes kept, and unsafe names refused.
func TestEntryTar(t *testing.T) {
	data, err := entryTar(map[string]Entry{
		"bin/busybox": {Data: []byte("x"), Mode: 0o755},
		"bin/sh":      {Link: "busybox"},
	}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	r := tar.NewReader(bytes.NewReader(data))
	var got []string
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(h.Typeflag)+h.Name+"->"+h.Linkname)
	}
	want := []string{"5bin/->", "0bin/busybox->", "2bin/sh->busybox"}
	if len(got) != len(want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"/etc/passwd", "../x", "a/../../b", ""} {
		if _, err := entryTar(map[string]Entry{bad: {}}, time.Unix(0, 0)); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}
