// SPDX-License-Identifier: Apache-2.0
package health

import (
	"errors"
	"fmt"
	"net/netip"
)

// Target is one backend to probe.
type Target struct {
	// Key identifies the target across calls to [Checker.Set]; the caller chooses it (for
	// example "namespace/service/port/ip") and it must be unique and not empty.
	Key string
	// Addr is the backend's address. Its port is probed unless [Check.Port] is set, so it may
	// be 0 only when that is.
	Addr netip.AddrPort
	// Check is how the backend is probed.
	Check Check
}

// Validate returns an error naming the bad field of t, or nil.
func (t Target) Validate() error {
	switch {
	case t.Key == "":
		return errors.New("Target.Key: empty")
	case !t.Addr.Addr().IsValid():
		return fmt.Errorf("target %q: Target.Addr: not set", t.Key)
	case t.Addr.Addr().IsUnspecified() || t.Addr.Addr().IsMulticast():
		return fmt.Errorf("target %q: Target.Addr %v: expected a unicast address", t.Key, t.Addr.Addr())
	case t.Addr.Port() == 0 && t.Check.Port == 0:
		return fmt.Errorf("target %q: Target.Addr %v has no port and Check.Port is 0", t.Key, t.Addr)
	}
	if err := t.Check.Validate(); err != nil {
		return fmt.Errorf("target %q: %w", t.Key, err)
	}
	return nil
}

// dest returns the address a probe of t goes to: Addr, with Check.Port when that is set.
func (t Target) dest() netip.AddrPort {
	if t.Check.Port != 0 {
		return netip.AddrPortFrom(t.Addr.Addr(), t.Check.Port)
	}
	return t.Addr
}
