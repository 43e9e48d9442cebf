// SPDX-License-Identifier: Apache-2.0
package kernelinfo

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

func TestHint(t *testing.T) {
	verr := fmt.Errorf("load program: %w", &ebpf.VerifierError{})
	for _, c := range []struct {
		release string
		err     error
		hinted  bool
	}{
		{"6.1.0-57-amd64", verr, true},
		{"5.15.0", verr, true},
		{"6.11.9", verr, true},
		{"6.12.95+deb12-amd64", verr, false},
		{"6.18.44-fc-v1045", verr, false},
		{"7.0", verr, false},
		{"unknown", verr, false},
		{"6.1.0", errors.New("map create: operation not permitted"), false},
		{"6.1.0", nil, false},
	} {
		got := hint(c.err, c.release)
		if !errors.Is(got, c.err) {
			t.Errorf("%s: %v does not wrap %v", c.release, got, c.err)
		}
		if hinted := got != nil && strings.Contains(got.Error(), "bookworm-backports"); hinted != c.hinted {
			t.Errorf("%s, %v: hinted %v, want %v (%v)", c.release, c.err, hinted, c.hinted, got)
		}
	}
	if n := note("6.1.0-57-amd64"); !strings.HasPrefix(n, "kernel 6.1.0-57-amd64 is older than 6.12") || !strings.HasSuffix(n, ": ") {
		t.Errorf("note on 6.1: %q", n)
	}
	if n := note("6.18.44"); n != "" {
		t.Errorf("note on 6.18: %q", n)
	}
	if Release() == "" {
		t.Error("Release is empty")
	}
}
