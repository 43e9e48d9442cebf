// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressPool is a set of addresses the controller hands out to LoadBalancer Services of xlb's
// class. Pools are tried in order of spec.priority (lower first), then name: a Service gets
// the lowest free address of the first pool that admits it and has one of its family. The
// pool's name is what a Service's xlb.dev/address-pool annotation names, so it must be a DNS
// label. No two pools may overlap: an overlapping pool is not used and says so on its status.
// Editing or deleting a pool never takes an address from a Service that holds it: the Service
// keeps it (reported on the Service) until it asks for another or is deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=xpool,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
// +kubebuilder:printcolumn:name="Auto",type=boolean,JSONPath=`.spec.autoAssign`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Free",type=string,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 lower-case letters, digits and '-'): Services name the pool in an annotation"
type AddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator wants.
	Spec AddressPoolSpec `json:"spec"`
	// Status is what the controller makes of it.
	// +optional
	Status AddressPoolStatus `json:"status,omitempty"`
}

// AddressPoolSpec is a pool's configuration (the pools[] item of the gateway file, with the
// name in metadata.name).
type AddressPoolSpec struct {
	// Addresses are the pool's addresses, each a CIDR ("198.18.100.0/24", "2001:db8:100::/120"),
	// a range of one family ("198.18.101.10-198.18.101.20") or one address. IPv4 and IPv6 may
	// be mixed. No two of them, in this pool or another, may overlap.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=100
	// +kubebuilder:validation:items:XValidation:rule="self.contains('-') ? (self.split('-').size() == 2 && isIP(self.split('-')[0].trim()) && isIP(self.split('-')[1].trim()) && ip(self.split('-')[0].trim()).family() == ip(self.split('-')[1].trim()).family()) : (isCIDR(self) || isIP(self))",message="must be a CIDR, a range first-last of one family, or an IP address"
	Addresses []string `json:"addresses"`

	// AutoAssign says whether Services that name neither an address nor a pool get addresses
	// from this pool. false keeps the pool for Services that ask for it by name or address.
	// +kubebuilder:default=true
	// +optional
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255 when allocating (some clients
	// and middleboxes mistake them for classful network or broadcast addresses).
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// Namespaces, if not empty, are the only namespaces whose Services may use the pool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// ServiceSelector, if not empty, maps label keys to values: a Service may use the pool
	// only if it carries every one of them (MetalLB's serviceSelectors[].matchLabels). It
	// selects, it does not protect: a Service's author writes its labels. Namespaces is the
	// boundary between tenants.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 316 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="keys must be label keys: an optional DNS prefix and '/', then a name of at most 63 characters"
	ServiceSelector map[string]LabelValue `json:"serviceSelector,omitempty"`

	// CrossNamespaceSharing lets Services of different namespaces share an address of this
	// pool when they carry the same xlb.dev/allow-shared-ip key (and no port clashes). Off by
	// default: an address is shared only among Services of one namespace, because a sharing
	// key is a word any tenant can write, and sharing a VIP lets one tenant take ports of
	// another's (an ACME HTTP-01 challenge on :80 of someone's :443 VIP). Turn it on only for
	// a pool whose namespaces trust each other (with namespaces set).
	// +optional
	CrossNamespaceSharing bool `json:"crossNamespaceSharing,omitempty"`

	// Priority orders the pools: a Service is offered the pools in increasing priority, then
	// by name. Default 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Priority int32 `json:"priority,omitempty"`

	// BGP holds the attributes this pool's VIP routes are announced with, on top of the
	// gateway's.
	// +optional
	BGP *RouteAttributes `json:"bgp,omitempty"`
}

// LabelValue is a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.',
// starting and ending with a letter or digit, or empty.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type LabelValue string

// RouteAttributes are BGP path attributes of a VIP route.
type RouteAttributes struct {
	// Communities are RFC 1997 communities, "ASN:value" (each 0 to 65535).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=11
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') && int(self.split(':')[0]) <= 65535 && int(self.split(':')[1]) <= 65535",message="must be ASN:value, each 0 to 65535"
	Communities []string `json:"communities,omitempty"`
	// LargeCommunities are RFC 8092 large communities, "global:local1:local2" (each 0 to
	// 4294967295).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') && self.split(':').all(x, int(x) <= 4294967295)",message="must be global:local1:local2, each 0 to 4294967295"
	LargeCommunities []string `json:"largeCommunities,omitempty"`
	// LocalPref is the LOCAL_PREF of the routes (sent to iBGP peers only).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPref *int64 `json:"localPref,omitempty"`
	// MED is the MULTI_EXIT_DISC of the routes.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	MED *int64 `json:"med,omitempty"`
}

// AddressPoolStatus is what the controller (the leading gateway) makes of a pool.
type AddressPoolStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Used is how many of the pool's addresses Services hold.
	// +optional
	Used int64 `json:"used"`
	// Free is how many addresses are left to hand out, in decimal (an IPv6 pool may hold more
	// than an int64 counts), IPv4 and IPv6 together.
	// +optional
	Free string `json:"free,omitempty"`
	// Conditions: Ready is True when the pool is in use, False with a reason (Invalid,
	// Overlapping) and a message when it is not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AddressPoolList is a list of AddressPools.
//
// +kubebuilder:object:root=true
type AddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the pools.
	Items []AddressPool `json:"items"`
}
