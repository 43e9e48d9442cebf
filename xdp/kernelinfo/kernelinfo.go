// SPDX-License-Identifier: Apache-2.0

// Package kernelinfo tells an operator which kernel xlb's BPF programs need when a verifier
// rejects them: the programs are verified and tested on Linux 6.12 and later, and older
// verifiers (Debian 12's own 6.1, for one) reject some of them (too complex, or a bound they
// cannot follow). Without this, the error says only what the verifier saw.
package kernelinfo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Oldest is the oldest kernel release (major, minor) xlb's BPF programs are tested on: Debian 12's
// bookworm-backports kernel (deploy/vagrant/README.md).
var Oldest = [2]int{6, 12}

// Release returns the running kernel's release (uname -r), or "unknown".
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// parse returns the major and minor numbers at the start of a kernel release ("6.1.0-57-amd64"
// gives 6, 1), ok false when it has none.
func parse(release string) (major, minor int, ok bool) {
	ma, rest, found := strings.Cut(release, ".")
	if !found {
		return 0, 0, false
	}
	mi := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		mi = rest[:i]
	}
	a, err1 := strconv.Atoi(ma)
	b, err2 := strconv.Atoi(mi)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return a, b, true
}

// older reports whether release is older than Oldest (false when it cannot tell).
func older(release string) bool {
	a, b, ok := parse(release)
	return ok && (a < Oldest[0] || (a == Oldest[0] && b < Oldest[1]))
}

// VerifierHint returns err, prefixed with Note when err is a verifier rejection (an
// *ebpf.VerifierError) on a kernel older than Oldest; any other error, or one on a kernel as new
// as Oldest, is returned as it is.
func VerifierHint(err error) error {
	return hint(err, Release())
}

// Note returns, on a kernel older than Oldest, a sentence (ending in ": ") that puts a verifier's
// rejection down to the kernel's age and says what to install; "" on any other kernel. For
// callers that print the verifier's whole log (%+v) themselves.
func Note() string {
	return note(Release())
}

func note(release string) string {
	if !older(release) {
		return ""
	}
	return fmt.Sprintf("kernel %s is older than %d.%d, the oldest xlb's BPF programs are tested on "+
		"(Debian 12: install the bookworm-backports kernel), and its verifier rejected one: ",
		release, Oldest[0], Oldest[1])
}

func hint(err error, release string) error {
	var verr *ebpf.VerifierError
	if err == nil || !errors.As(err, &verr) || note(release) == "" {
		return err
	}
	return fmt.Errorf("%s%w", note(release), err)
}
