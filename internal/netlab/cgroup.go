// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// InCgroup makes cmd start inside cgroup, a cgroup v2 directory (clone3's CLONE_INTO_CGROUP),
// so that the programs attached there see its socket calls from its first one. It returns
// the open directory, which must stay open until cmd has started.
func InCgroup(cmd *exec.Cmd, cgroup string) (io.Closer, error) {
	f, err := os.Open(cgroup)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", cgroup, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
	return f, nil
}

// ErrnoName names the errno under err ("ECONNREFUSED"), or gives err's text when there is
// none ("" for nil).
func ErrnoName(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		if name := unix.ErrnoName(en); name != "" {
			return name
		}
	}
	if err == nil {
		return ""
	}
	return err.Error()
}
