// SPDX-License-Identifier: Apache-2.0
package cluster

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// E2EOptions say which of upstream's e2e specs to run.
type E2EOptions struct {
	// Focus and Skip are ginkgo regular expressions over the spec names.
	Focus, Skip string
	// Timeout bounds the whole run (ginkgo's --ginkgo.timeout; default 2 h).
	Timeout time.Duration
	// Output receives e2e.test's output as it runs (default: the log file only).
	Output *os.File
}

// SpecResult is one spec's outcome.
type SpecResult struct {
	Name    string
	Result  string // passed, failed, skipped, …
	Seconds float64
	// Message is the failure or skip reason (first line).
	Message string
}

// RunE2E runs upstream's e2e.test (built by make cluster-bins) from the client namespace
// behind the gateway, as an internet client would reach the VIPs, with the admin kubeconfig
// and kubectl, and returns each spec's result from its JUnit report. Its output is in
// <cluster dir>/e2e/e2e.log.
func (c *Cluster) RunE2E(ctx context.Context, g *Gateway, opts E2EOptions) ([]SpecResult, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Hour
	}
	dir := filepath.Join(c.dir, "e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	junit := filepath.Join(dir, "junit.xml")
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--provider=local",
		"--kubectl-path=" + filepath.Join(c.Bins, "kubectl"),
		"--dump-logs-on-failure=false",
		"--disable-log-dump",
		"--report-dir=" + dir,
		"--e2e-output-dir=" + dir,
		"--num-nodes=" + fmt.Sprint(len(c.Nodes)),
		"--ginkgo.junit-report=" + junit,
		"--ginkgo.timeout=" + opts.Timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
	if opts.Focus != "" {
		args = append(args, "--ginkgo.focus="+opts.Focus)
	}
	if opts.Skip != "" {
		args = append(args, "--ginkgo.skip="+opts.Skip)
	}
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + g.ClientNS.Name, "--",
		filepath.Join(c.Bins, "e2e.test")}, args...)...)
	// kubectl on PATH too: some specs shell out to it by name.
	cmd.Env = append(os.Environ(), "PATH="+c.Bins+":"+os.Getenv("PATH"), "HOME="+dir)
	cmd.Dir = dir
	if opts.Output != nil {
		cmd.Stdout, cmd.Stderr = multi(log, opts.Output), multi(log, opts.Output)
	} else {
		cmd.Stdout, cmd.Stderr = log, log
	}
	runErr := cmd.Run()
	results, err := readJUnit(junit)
	if err != nil {
		return nil, fmt.Errorf("e2e.test (%v): %w", runErr, err)
	}
	return results, nil
}

type multiWriter []*os.File

func (m multiWriter) Write(p []byte) (int, error) {
	for _, f := range m {
		if _, err := f.Write(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func multi(fs ...*os.File) multiWriter { return multiWriter(fs) }

// readJUnit reads ginkgo's JUnit report: the specs that ran or skipped themselves (not those
// the focus left out, nor the suite's set-up nodes).
func readJUnit(path string) ([]SpecResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string  `xml:"name,attr"`
				Status  string  `xml:"status,attr"`
				Time    float64 `xml:"time,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("JUnit report %s: %w", path, err)
	}
	var out []SpecResult
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			if !strings.Contains(tc.Name, "[sig-") {
				continue
			}
			r := SpecResult{Name: strings.TrimSpace(strings.TrimPrefix(tc.Name, "[It]")), Result: tc.Status, Seconds: tc.Time}
			for _, m := range []*struct {
				Message string `xml:"message,attr"`
			}{tc.Failure, tc.Error, tc.Skipped} {
				if m != nil && r.Message == "" {
					r.Message, _, _ = strings.Cut(strings.TrimSpace(m.Message), "\n")
				}
			}
			if r.Result == "skipped" && r.Message == "skipped" {
				continue // not focused (a spec that skips itself says why)
			}
			out = append(out, r)
		}
	}
	return out, nil
}
