// SPDX-License-Identifier: Apache-2.0
package vmtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Initramfs is the guest's root file system, written as an uncompressed cpio "newc" archive (the
// kernel unpacks it as is; compressing ~200 MB of test binaries would cost more CPU than QEMU
// saves reading it).
type Initramfs struct {
	files map[string]entry // guest path → what it holds
}

type entry struct {
	host  string // copy this host file, or
	data  []byte // these bytes, or
	link  string // a symbolic link to this
	mode  uint32 // permission bits
	isDir bool
}

// NewInitramfs returns an empty root.
func NewInitramfs() *Initramfs { return &Initramfs{files: map[string]entry{}} }

// File adds the host file src at guest path dst.
func (r *Initramfs) File(dst, src string) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("initramfs %s: %w", dst, err)
	}
	r.parents(dst)
	r.files[clean(dst)] = entry{host: src, mode: uint32(st.Mode().Perm())}
	return nil
}

// Bytes adds data at guest path dst with mode.
func (r *Initramfs) Bytes(dst string, data []byte, mode uint32) {
	r.parents(dst)
	r.files[clean(dst)] = entry{data: data, mode: mode}
}

// Symlink adds a link at dst pointing to target.
func (r *Initramfs) Symlink(dst, target string) {
	r.parents(dst)
	r.files[clean(dst)] = entry{link: target, mode: 0o777}
}

// Dir adds an empty directory.
func (r *Initramfs) Dir(dst string) {
	r.parents(dst)
	if _, ok := r.files[clean(dst)]; !ok {
		r.files[clean(dst)] = entry{isDir: true, mode: 0o755}
	}
}

func (r *Initramfs) parents(p string) {
	for d := path.Dir(clean(p)); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		if _, ok := r.files[d]; !ok {
			r.files[d] = entry{isDir: true, mode: 0o755}
		}
	}
}

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// WriteTo writes the archive to w.
func (r *Initramfs) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names) // parents before children
	var n int64
	ino := uint32(1)
	for _, name := range names {
		e := r.files[name]
		var mode uint32
		var size int64
		var body io.Reader
		switch {
		case e.isDir:
			mode = 0o040000 | e.mode
		case e.link != "":
			mode = 0o120000 | e.mode
			size = int64(len(e.link))
			body = strings.NewReader(e.link)
		case e.host != "":
			f, err := os.Open(e.host)
			if err != nil {
				return n, fmt.Errorf("initramfs %s: %w", name, err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return n, fmt.Errorf("initramfs %s: %w", name, err)
			}
			mode = 0o100000 | e.mode
			size = st.Size()
			body = f
		default:
			mode = 0o100000 | e.mode
			size = int64(len(e.data))
			body = strings.NewReader(string(e.data))
		}
		m, err := writeRecord(bw, ino, name, mode, size, body)
		n += m
		if err != nil {
			return n, fmt.Errorf("initramfs %s: %w", name, err)
		}
		ino++
	}
	m, err := writeRecord(bw, ino, "TRAILER!!!", 0, 0, nil)
	n += m
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// writeRecord writes one newc header, name and body, each padded to 4 bytes.
func writeRecord(w io.Writer, ino uint32, name string, mode uint32, size int64, body io.Reader) (int64, error) {
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	var n int64
	k, err := io.WriteString(w, hdr+name+"\x00")
	n += int64(k)
	if err != nil {
		return n, err
	}
	if err := pad(w, &n); err != nil {
		return n, err
	}
	if body != nil {
		c, err := io.CopyN(w, body, size)
		n += c
		if err != nil {
			return n, err
		}
	}
	return n, pad(w, &n)
}

func pad(w io.Writer, n *int64) error {
	if r := *n % 4; r != 0 {
		k, err := w.Write(make([]byte, 4-r))
		*n += int64(k)
		return err
	}
	return nil
}
