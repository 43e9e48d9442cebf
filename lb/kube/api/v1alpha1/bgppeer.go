// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPPeer is a BGP neighbour of the gateways: the upstream router each selected gateway opens a
// session with to announce its VIPs. The session's own side (router ID, local AS, listen port,
// graceful restart) stays in each gateway's config file (bgp section), which must exist for a
// gateway to use BGPPeers. A gateway applies a change live: an added peer gets a session, a
// removed one loses it, an edited one is reset, and no other session is touched. A peer whose
// address is also in a gateway's file is left to the file (reported on that gateway's
// GatewayStatus).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=xpeer,categories=xlb
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="ASN",type=integer,JSONPath=`.spec.asn`
// +kubebuilder:printcolumn:name="BFD",type=boolean,JSONPath=`.spec.bfd.enabled`
// +kubebuilder:printcolumn:name="Gateways",type=string,JSONPath=`.spec.gateways`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the neighbour.
	Spec BGPPeerSpec `json:"spec"`
}

// BGPPeerSpec is a neighbour (the bgp.peers[] item of the gateway file) and the gateways that
// peer with it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.localAddress) || (self.address.contains(':') == self.localAddress.contains(':'))",message="localAddress must be of the family of address"
// +kubebuilder:validation:XValidation:rule="!has(self.bfd) || !self.bfd.enabled || !has(self.multihopTTL) || self.multihopTTL <= 1",message="bfd is single-hop only: multihopTTL must be at most 1"
// +kubebuilder:validation:XValidation:rule="!has(self.keepaliveTime) || duration(self.keepaliveTime) < (has(self.holdTime) ? duration(self.holdTime) : duration('9s'))",message="keepaliveTime must be shorter than holdTime (default 9s)"
type BGPPeerSpec struct {
	// Address is the neighbour's unicast IPv4 or IPv6 address; the session carries the VIPs of
	// its family only.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).isGlobalUnicast()",message="must be a unicast IP address"
	Address string `json:"address"`
	// ASN is the neighbour's AS number (the gateways' own for iBGP).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASN int64 `json:"asn"`
	// Port is the neighbour's TCP port; default 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// PasswordSecretRef names the key of a Secret in the gateways' namespace (where their
	// ServiceAccount may read Secrets) holding the TCP MD5 password, 1 to 80 bytes.
	// +optional
	PasswordSecretRef *SecretKeyRef `json:"passwordSecretRef,omitempty"`
	// MultihopTTL allows an eBGP neighbour that many hops away; 0 or absent: directly
	// connected.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	MultihopTTL int32 `json:"multihopTTL,omitempty"`
	// HoldTime is the hold time proposed in OPEN: whole seconds, 3s to 65535s; default 9s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s') && duration(self) <= duration('65535s') && duration(self).getMilliseconds() % 1000 == 0",message="must be whole seconds from 3s to 65535s"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// KeepaliveTime is the keepalive interval: whole seconds, shorter than holdTime; default 3s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('65535s') && duration(self).getMilliseconds() % 1000 == 0",message="must be whole seconds from 1s to 65535s"
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// ConnectRetry is the wait between connection attempts: whole seconds; default 1s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('65535s') && duration(self).getMilliseconds() % 1000 == 0",message="must be whole seconds from 1s to 65535s"
	ConnectRetry *metav1.Duration `json:"connectRetry,omitempty"`
	// Passive makes the gateways wait for the neighbour to connect (their bgp.listenPort must
	// be set).
	// +optional
	Passive bool `json:"passive,omitempty"`
	// LocalAddress is the session's source address, and so the next hop announced; of the
	// family of address. Absent: the kernel picks it. Usually only set with gateways listing
	// one gateway.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	LocalAddress string `json:"localAddress,omitempty"`
	// BFD runs single-hop BFD with the neighbour (which must run it too).
	// +optional
	BFD *BFD `json:"bfd,omitempty"`

	// NodeSelector selects the gateways that are Nodes by their Node's labels (the Node named
	// like the gateway). With Gateways, a gateway matching either peers.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Gateways lists gateways by name (kubernetes.gatewayName), for appliances outside the
	// cluster. With neither this nor nodeSelector every gateway peers.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Gateways []string `json:"gateways,omitempty"`
}

// SecretKeyRef names a key of a Secret in the gateways' namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key is the key in the Secret's data; default "password".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// BFD is a peer's BFD session.
type BFD struct {
	// Enabled turns BFD on; default true when bfd is present.
	// +kubebuilder:default=true
	// +optional
	Enabled bool `json:"enabled"`
	// TransmitInterval is the desired minimum transmit interval: whole milliseconds (checked by
	// the gateways), 50ms to
	// 60s; default 300ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('50ms') && duration(self) <= duration('60s')",message="must be from 50ms to 60s"
	TransmitInterval *metav1.Duration `json:"transmitInterval,omitempty"`
	// ReceiveInterval is the required minimum receive interval, as transmitInterval.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('50ms') && duration(self) <= duration('60s')",message="must be from 50ms to 60s"
	ReceiveInterval *metav1.Duration `json:"receiveInterval,omitempty"`
	// Multiplier is the detection multiplier, 1 to 255; default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	Multiplier int32 `json:"multiplier,omitempty"`
	// HoldDown dampens a flapping session: whole seconds, 1s to 1h; default 60s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h') && duration(self).getMilliseconds() % 1000 == 0",message="must be whole seconds from 1s to 1h"
	HoldDown *metav1.Duration `json:"holdDown,omitempty"`
}

// BGPPeerList is a list of BGPPeers.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the peers.
	Items []BGPPeer `json:"items"`
}
