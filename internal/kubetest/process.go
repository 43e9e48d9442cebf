// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
)

// process is one child program (etcd or kube-apiserver) with its output in a log file.
type process struct {
	// name is what the program is, for errors and logs.
	name string
	// logPath is the file its stdout and stderr go to.
	logPath string
	cmd     *exec.Cmd
	// exited is closed once the program has exited; err is then its Wait result.
	exited chan struct{}
	err    error
}

// startProcess starts bin with args, its output appended to logPath, in network namespace
// netns when it is not empty (nsenter execs bin: the pid and command line are bin's). The
// program is killed when ctx is done, when kill is called, or when this process dies
// (Pdeathsig).
func startProcess(ctx context.Context, netns, name, bin, logPath string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log file: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	if netns != "" {
		cmd = exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + netns, bin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill kills the program and waits for it to exit.
func (p *process) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// exitError returns a non-nil error when the program has already exited, with the end of its
// log.
func (p *process) exitError() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.name, p.err, p.logPath, p.tail(30))
	default:
		return nil
	}
}

// tail returns the last n lines of the program's log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

// tailFile returns the last n lines of the file at path, or why it could not be read.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago. All are held
// open until all are chosen, so they differ from each other.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// hostPort formats addr:port ([addr]:port for IPv6).
func hostPort(addr netip.Addr, port int) string {
	return netip.AddrPortFrom(addr, uint16(port)).String()
}
