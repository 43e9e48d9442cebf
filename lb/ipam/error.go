// SPDX-License-Identifier: Apache-2.0
package ipam

import (
	"fmt"
	"net/netip"
)

// Reason says why an address could not be given; its value is a CamelCase word, usable as the
// reason of a Kubernetes event.
type Reason string

// The reasons Assign fails.
const (
	// ReasonInvalidRequest: the request contradicts itself (a requested address of a family the
	// Service does not have, two addresses of one family, no family).
	ReasonInvalidRequest Reason = "InvalidRequest"
	// ReasonUnknownPool: the requested pool does not exist.
	ReasonUnknownPool Reason = "UnknownPool"
	// ReasonNotInAnyPool: a requested address is in no pool (or not in the requested one).
	ReasonNotInAnyPool Reason = "NotInAnyPool"
	// ReasonNoPoolMatches: no pool with addresses of the family admits the Service
	// (namespaces, selector, autoAssign off).
	ReasonNoPoolMatches Reason = "NoPoolMatches"
	// ReasonFamilyUnavailable: no pool (or not the requested one) has addresses of a family the
	// Service requires.
	ReasonFamilyUnavailable Reason = "FamilyUnavailable"
	// ReasonPoolExhausted: every pool that admits the Service is full.
	ReasonPoolExhausted Reason = "PoolExhausted"
	// ReasonAddressInUse: the address belongs to another Service and one of the two has no
	// sharing key, or the other is of another namespace and may not share with this one. Other
	// names it when it is of the same namespace.
	ReasonAddressInUse Reason = "AddressInUse"
	// ReasonSharingKeyMismatch: the address is shared by Services with another sharing key.
	// Other names one of them.
	ReasonSharingKeyMismatch Reason = "SharingKeyMismatch"
	// ReasonPortsClash: the address is shared under the same key, but a Service on it already
	// uses one of the ports. Other and Port name it.
	ReasonPortsClash Reason = "PortsClash"
)

// Error is why a Service got no address (or not the one it asked for).
type Error struct {
	// Service is the Service concerned ("namespace/name").
	Service string
	// Reason classifies the failure.
	Reason Reason
	// Addr is the address concerned, when there is one.
	Addr netip.Addr
	// Pool is the pool concerned, when there is one.
	Pool string
	// Other is the other Service involved (in use, key mismatch, port clash) when it is of the
	// asker's namespace, or "": another namespace's Service is never named.
	Other string
	// Port is the clashing port (ReasonPortsClash).
	Port Port
	// Detail says what is wrong and what to do, in the words of someone fixing the Service.
	Detail string
}

// Error returns "service NAMESPACE/NAME: DETAIL".
func (e *Error) Error() string { return "service " + e.Service + ": " + e.Detail }

// fail returns an *Error for r's Service.
func (r *Request) fail(reason Reason, format string, args ...any) *Error {
	return &Error{Service: r.Service, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
