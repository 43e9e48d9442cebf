// SPDX-License-Identifier: Apache-2.0
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// stateDir holds one file per running benchmark, named for its namespace prefix and holding its
// pid, so that a later run (or `xlb-bench down`) removes what a killed run left behind and never
// what a live one is using.
const stateDir = "/run/xlb-bench"

// nsSuffixes are the topology's namespace names after the prefix (see bench/topo).
var nsSuffixes = []string{"gen", "gw", "sink"}

// claim records that this process uses prefix; the returned function releases it.
func claim(prefix string) (func(), error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory %s: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, prefix)
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("claim prefix %s: %w", prefix, err)
	}
	return func() { _ = os.Remove(path) }, nil
}

// sweep removes the namespaces of runs whose process is gone (all of them with all set).
func sweep(log *slog.Logger, all bool) error {
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", stateDir, err)
	}
	var errs []error
	for _, e := range entries {
		prefix := e.Name()
		b, err := os.ReadFile(filepath.Join(stateDir, prefix))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if !all && pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // still running
		}
		for _, s := range nsSuffixes {
			name := prefix + s
			if _, err := os.Stat(filepath.Join("/run/netns", name)); err != nil {
				continue
			}
			log.Info("removing a leftover namespace", "netns", name, "pid", pid)
			errs = append(errs, (&netlab.NS{Name: name}).Delete())
		}
		_ = os.Remove(filepath.Join(stateDir, prefix))
	}
	return errors.Join(errs...)
}
