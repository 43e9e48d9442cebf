// SPDX-License-Identifier: Apache-2.0
package bfd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RunDir holds the files the daemon and `xlb bfd` share: the datapath health lease and the
// BFD status socket, named after the datapath's pin path (several datapaths on one host, as
// in the lab, each have their own).
const RunDir = "/run/xlb"

func runName(pinPath, kind string) string {
	return filepath.Join(RunDir, kind+"-"+strings.ReplaceAll(strings.Trim(filepath.Clean(pinPath), "/"), "/", "_"))
}

// LeasePath is the health lease file of the datapath pinned at pinPath.
func LeasePath(pinPath string) string { return runName(pinPath, "datapath-health") }

// SocketPath is the status socket of the `xlb bfd` that follows the datapath at pinPath.
func SocketPath(pinPath string) string { return runName(pinPath, "bfd") + ".sock" }

// Lease is the daemon's word on its datapath: healthy or not, until when. A daemon that dies
// stops renewing it, so a dead daemon's word lasts only until the lease ends (the daemon makes
// it as long as the routers' graceful restart: a restart within it keeps BFD up; past it the
// routers drop the routes anyway).
type Lease struct {
	Healthy bool   `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
	// Until is CLOCK_BOOTTIME in nanoseconds (shared by the processes of a host, unmoved by
	// wall-clock steps, counting suspend).
	Until int64 `json:"untilBoottimeNs"`
	Pid   int   `json:"pid"`
}

// Boottime is CLOCK_BOOTTIME now.
func Boottime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

// WriteLease writes l atomically (rename) to path.
func WriteLease(path string, l Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("health lease: %w", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("health lease: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("health lease: %w", err)
	}
	return nil
}

// CheckLease judges the lease at path: nil when it is absent (no daemon has spoken: the
// datapath's own checks decide) or healthy and current; else why not.
func CheckLease(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("health lease %s: %w", path, err)
	}
	var l Lease
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("health lease %s: %w", path, err)
	}
	if !l.Healthy {
		return fmt.Errorf("the daemon (pid %d) declared its datapath unhealthy: %s", l.Pid, l.Reason)
	}
	if now := int64(Boottime()); now >= l.Until {
		return fmt.Errorf("the daemon's health lease (pid %d) ended %v ago", l.Pid, time.Duration(now-l.Until).Round(time.Millisecond))
	}
	return nil
}

// Serve answers connections on the unix socket path with the server's sessions: a JSON line
// (Report) at once and at every change, until ctx ends.
func Serve(ctx context.Context, path string, s *Server) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("bfd status socket: %w", err)
	}
	_ = os.Remove(path) // a previous `xlb bfd`'s
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("bfd status socket: %w", err)
	}
	go func() { <-ctx.Done(); l.Close() }()
	defer os.Remove(path)
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		go func() {
			defer c.Close()
			go func() { <-ctx.Done(); c.Close() }()
			enc := json.NewEncoder(c)
			for {
				st, ch := s.Status()
				_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if enc.Encode(Report{Sessions: st, Drops: s.Drops()}) != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-ch:
				case <-time.After(time.Second):
				}
			}
		}()
	}
}

// Report is one line of the status socket.
type Report struct {
	Sessions []Status          `json:"sessions"`
	Drops    map[string]uint64 `json:"drops"`
}

// Watch connects to the status socket at path and calls fn with each report, reconnecting
// (every 200 ms) while `xlb bfd` is away, until ctx ends.
func Watch(ctx context.Context, path string, fn func(Report)) {
	for ctx.Err() == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			go func() { <-ctx.Done(); c.Close() }()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				var r Report
				if json.Unmarshal(sc.Bytes(), &r) == nil {
					fn(r)
				}
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
