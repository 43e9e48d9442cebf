// SPDX-License-Identifier: Apache-2.0
package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Boot runs image with initrd under QEMU (TCG), the kernel command line's extra NAME=value pairs
// reaching /init as environment variables, and returns the serial console's output. The guest
// is killed at timeout (its output so far is returned with the error); console, when not nil,
// gets a copy of the output as it comes.
func Boot(ctx context.Context, image, initrd string, env []string, timeout time.Duration, console io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{
		"-accel", "tcg", "-cpu", "max", "-m", "2G", "-smp", "2",
		"-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio", "-monitor", "none",
		"-kernel", image, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=3 " + strings.Join(env, " "),
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	var w io.Writer = &out
	if console != nil {
		w = io.MultiWriter(&out, console)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Stdin = nil
	err := cmd.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.String(), fmt.Errorf("guest %s: killed after %s", image, timeout)
	}
	if err != nil {
		return out.String(), fmt.Errorf("guest %s: qemu: %w", image, err)
	}
	return out.String(), nil
}

// WriteInitramfs writes r to a new temporary file and returns its path.
func WriteInitramfs(r *Initramfs, dir string) (string, error) {
	f, err := os.CreateTemp(dir, "initramfs-*.cpio")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if _, err := r.WriteTo(f); err != nil {
		f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}
