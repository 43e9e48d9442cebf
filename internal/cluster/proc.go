// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is a daemon the cluster started: its own process group, output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts argv (the first element a binary) with its output in logPath.
func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// exited says whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the end of the process's log.
func (p *proc) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
