// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/xlb-dev/xlb/internal/ociimage"
)

// The image names the e2e framework (test/utils/image, v1.37.2) and containerd ask for. They are
// built here and imported into every node's containerd, so nothing is ever pulled.
const (
	PauseImage   = "registry.k8s.io/pause:3.10.2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	BusyBoxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
)

// busyboxApplets are the shell tools the specs run inside agnhost and busybox containers
// (`/bin/sh -c`, sleep, cat, ...), links to Debian's static busybox.
var busyboxApplets = []string{"ash", "cat", "echo", "sleep", "ls", "ps", "grep", "sed", "hostname", "ip", "true", "false", "test", "date", "env", "mkdir", "rm", "touch", "timeout", "nslookup", "printf", "head", "tail", "awk", "dd", "seq", "kill", "id", "uname", "tr", "cut", "wc", "sort", "uniq", "mv", "cp", "chmod", "ln", "find", "xargs", "tee", "expr", "basename", "dirname", "stat", "nohup", "pwd", "mount", "df", "du", "netstat", "ping", "ping6", "which", "[", "[["}

// hostTools are dynamically linked Debian binaries the specs call with options busybox lacks
// (OpenBSD nc's -v -t -u, curl) or where bookworm's busybox fails (its wget dies of SIGSEGV
// with -T, the timeout every spec passes); they go into the image with the libraries ldd names.
// /bin/sh is dash: busybox's shell runs its own applets (nc, wget) in preference to the PATH's.
var hostTools = map[string]string{
	"bin/sh":       "/bin/dash",
	"usr/bin/curl": "/usr/bin/curl",
	"usr/bin/nc":   "/bin/nc.openbsd",
	"usr/bin/wget": "/usr/bin/wget",
}

// BuildImages writes the pause, agnhost and busybox images into dir from the agnhost binary
// (built from k8s.io/kubernetes/test/images/agnhost) and this host's static busybox, curl and
// OpenBSD nc, and returns the archives' paths.
func BuildImages(dir, agnhost string) ([]string, error) {
	bin, err := os.ReadFile(agnhost)
	if err != nil {
		return nil, fmt.Errorf("agnhost for the images: %w", err)
	}
	tools, err := toolFiles()
	if err != nil {
		return nil, err
	}
	withAgnhost := map[string]ociimage.Entry{"agnhost": {Data: bin, Mode: 0o755}}
	for k, v := range tools {
		withAgnhost[k] = v
	}
	specs := []ociimage.Spec{
		// The sandbox only has to sleep until it is killed: agnhost's pause does.
		{Refs: []string{PauseImage}, Files: map[string]ociimage.Entry{"pause": {Data: bin, Mode: 0o755}},
			Entrypoint: []string{"/pause", "pause"}},
		{Refs: []string{AgnhostImage}, Files: withAgnhost, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
		{Refs: []string{BusyBoxImage}, Files: tools, Cmd: []string{"sh"}},
	}
	var out []string
	for i, s := range specs {
		p := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		if _, err := ociimage.BuildFiles(s, p); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Refs[0], err)
		}
		out = append(out, p)
	}
	return out, nil
}

// toolFiles is busybox with its applet links, curl and nc with their shared libraries, and an
// /etc with passwd, group and nsswitch for the tools that read them.
func toolFiles() (map[string]ociimage.Entry, error) {
	files := map[string]ociimage.Entry{
		"etc/passwd":        {Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		"etc/group":         {Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		"etc/nsswitch.conf": {Data: []byte("hosts: files dns\n")},
		// GNU wget retries a timed-out request 20 times (minutes); busybox's, which the specs
		// were written for, tries once.
		"etc/wgetrc": {Data: []byte("tries = 1\n")},
		"tmp/.keep":  {},
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox (make deps installs busybox-static): %w", err)
	}
	files["bin/busybox"] = ociimage.Entry{Data: bb, Mode: 0o755}
	for _, a := range busyboxApplets {
		files["bin/"+a] = ociimage.Entry{Link: "busybox"}
	}
	for dst, src := range hostTools {
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("%s for the test images (make deps installs curl, netcat-openbsd and wget): %w", src, err)
		}
		files[dst] = ociimage.Entry{Data: data, Mode: 0o755}
		libs, err := sharedLibs(src)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			real, err := filepath.EvalSymlinks(l)
			if err != nil {
				return nil, fmt.Errorf("library %s of %s: %w", l, src, err)
			}
			data, err := os.ReadFile(real)
			if err != nil {
				return nil, err
			}
			// Debian's merged /usr: the loader and libraries are found under /lib and /lib64 too.
			rel := strings.TrimPrefix(filepath.Clean(l), "/")
			rel = strings.TrimPrefix(rel, "usr/")
			files["usr/"+rel] = ociimage.Entry{Data: data, Mode: 0o755}
		}
	}
	files["lib"] = ociimage.Entry{Link: "usr/lib"}
	files["lib64"] = ociimage.Entry{Link: "usr/lib64"}
	return files, nil
}

// sharedLibs lists the shared objects ldd says bin loads (the dynamic loader included).
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}
