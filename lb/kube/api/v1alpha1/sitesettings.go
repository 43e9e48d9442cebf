// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SiteSettingsName is the name of the one SiteSettings object a site has.
const SiteSettingsName = "site"

// SiteSettings are the datapath settings that must be equal on every gateway of a site: the
// flow hash's seed and the Maglev table size (a flow that ECMP moves to another gateway must
// be hashed there as here), the forwarding mode and the conntrack timeouts. There is one
// object, named "site"; each gateway in Kubernetes mode reads it, and its values override
// the same keys of the gateway's file (datapath section).
//
// When they take effect: forwarding and dsrFallback at once, on every gateway. The seed, the
// table size and the timeouts when a gateway starts (they are loaded with the datapath): until
// it restarts, a gateway reports the difference on its GatewayStatus (status.site), so a
// rolling restart can be planned. Changing the seed or the table size remaps every flow
// without a conntrack entry: connections that ECMP moves between two gateways, one restarted
// and one not, may break during the roll (docs/kubernetes.md, "Site settings").
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=xsite,categories=xlb
// +kubebuilder:printcolumn:name="Seed",type=integer,JSONPath=`.spec.seed`
// +kubebuilder:printcolumn:name="Forwarding",type=string,JSONPath=`.spec.forwarding`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'site'",message="there is one SiteSettings object, named site"
type SiteSettings struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the settings. An absent field leaves each gateway's own (its file's, or the
	// default).
	Spec SiteSettingsSpec `json:"spec"`
}

// SiteSettingsSpec are the site-wide datapath settings (the datapath section's keys of the
// same names).
//
// +kubebuilder:validation:XValidation:rule="!has(self.dsrFallback) || (has(self.forwarding) && self.forwarding == 'dsr')",message="dsrFallback needs forwarding: dsr"
type SiteSettingsSpec struct {
	// Seed seeds the flow hash, 0 to 4294967295.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	Seed *int64 `json:"seed,omitempty"`
	// MaglevTableSize is the Maglev table size of the services that set none: a prime from 2
	// to 1048573 (the gateways check that it is prime).
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=1048573
	MaglevTableSize *int32 `json:"maglevTableSize,omitempty"`
	// Forwarding is how replies reach clients: returnPath (through a gateway) or dsr (direct
	// server return through the node agents).
	// +optional
	// +kubebuilder:validation:Enum=returnPath;dsr
	Forwarding string `json:"forwarding,omitempty"`
	// DSRFallback is, with forwarding dsr, what becomes of a backend whose node cannot serve
	// DSR: exclude (no new flows) or returnPath.
	// +optional
	// +kubebuilder:validation:Enum=exclude;returnPath
	DSRFallback string `json:"dsrFallback,omitempty"`
	// TCPEstablishedTimeout is conntrack's idle timeout of an established TCP flow, at least
	// 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	TCPEstablishedTimeout *metav1.Duration `json:"tcpEstablishedTimeout,omitempty"`
	// TCPClosingTimeout is conntrack's idle timeout of a TCP flow after FIN or RST, at least 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	TCPClosingTimeout *metav1.Duration `json:"tcpClosingTimeout,omitempty"`
	// UDPTimeout is conntrack's idle timeout of a UDP flow, at least 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="must be at least 1s"
	UDPTimeout *metav1.Duration `json:"udpTimeout,omitempty"`
}

// SiteSettingsList is a list of SiteSettings.
//
// +kubebuilder:object:root=true
type SiteSettingsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the objects (one, named site).
	Items []SiteSettings `json:"items"`
}
