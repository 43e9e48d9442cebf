// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayStatus is what one gateway reports about itself: its BGP sessions, the VIPs it
// announces and why any is withdrawn, its datapath and its last reconcile. Each gateway writes
// the object named after itself (its kubernetes.gatewayName) and renews it every
// HeartbeatInterval; the leading gateway marks the object of a gateway that stopped renewing
// it as stale (condition Ready False, reason Stale). `kubectl get gatewaystatuses` (short
// name xgw) answers "which gateway announces what" without logging into a gateway.
//
// The object has no spec: everything in it is status, written by its gateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=xgw,categories=xlb
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Leader",type=boolean,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="Datapath",type=string,JSONPath=`.status.datapath.kind`
// +kubebuilder:printcolumn:name="Sessions",type=string,JSONPath=`.status.sessionsUp`
// +kubebuilder:printcolumn:name="Announced",type=integer,JSONPath=`.status.announcedCount`
// +kubebuilder:printcolumn:name="Withdrawn",type=integer,JSONPath=`.status.withdrawnCount`
// +kubebuilder:printcolumn:name="Seed",type=integer,priority=1,JSONPath=`.status.site.seed`
// +kubebuilder:printcolumn:name="Restart-Pending",type=string,priority=1,JSONPath=`.status.site.restartPending`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeat`
// +kubebuilder:printcolumn:name="Problems",type=string,priority=1,JSONPath=`.status.problems`
// +kubebuilder:printcolumn:name="VIPs",type=string,priority=1,JSONPath=`.status.announced[*].address`
type GatewayStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the gateway's report.
	// +optional
	Status GatewayStatusStatus `json:"status,omitempty"`
}

// GatewayStatusStatus is a gateway's report.
type GatewayStatusStatus struct {
	// Version is the xlb version the gateway runs.
	// +optional
	Version string `json:"version,omitempty"`
	// Leader says whether the gateway leads (allocates addresses and writes Service status).
	// +optional
	Leader bool `json:"leader"`
	// Heartbeat is when the gateway last wrote this object; it writes it at least every
	// heartbeatSeconds.
	// +optional
	Heartbeat *metav1.Time `json:"heartbeat,omitempty"`
	// HeartbeatSeconds is the longest the gateway waits between two writes; a heartbeat older
	// than three times this marks the object stale.
	// +optional
	HeartbeatSeconds int32 `json:"heartbeatSeconds,omitempty"`
	// Datapath is the gateway's datapath.
	// +optional
	Datapath DatapathStatus `json:"datapath,omitempty"`
	// LastReconcile is the gateway's last reconcile of its datapath and routes.
	// +optional
	LastReconcile *ReconcileStatus `json:"lastReconcile,omitempty"`
	// SessionsUp is "established/configured" BGP sessions, e.g. "2/2".
	// +optional
	SessionsUp string `json:"sessionsUp,omitempty"`
	// Sessions are the gateway's BGP sessions, by peer address.
	// +optional
	// +listType=map
	// +listMapKey=peer
	Sessions []BGPSessionStatus `json:"sessions,omitempty"`
	// AnnouncedCount is len(announced).
	// +optional
	AnnouncedCount int32 `json:"announcedCount"`
	// Announced are the VIPs the gateway announces over BGP.
	// +optional
	// +listType=map
	// +listMapKey=address
	Announced []VIPStatus `json:"announced,omitempty"`
	// WithdrawnCount is len(withdrawn).
	// +optional
	WithdrawnCount int32 `json:"withdrawnCount"`
	// Withdrawn are the VIPs the gateway balances but does not announce, each with the reason.
	// +optional
	// +listType=map
	// +listMapKey=address
	Withdrawn []VIPStatus `json:"withdrawn,omitempty"`
	// Site is how the gateway stands with the SiteSettings object.
	// +optional
	Site *SiteStatus `json:"site,omitempty"`
	// Problems are configuration the gateway could not use (a BGPPeer it refused, say), one
	// message each.
	// +optional
	// +listType=atomic
	Problems []string `json:"problems,omitempty"`
	// Conditions: Ready is True while the gateway reports in time and its datapath is healthy;
	// False with reason Stale (no heartbeat), DatapathUnhealthy or ReconcileFailed otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SiteStatus is how a gateway stands with the SiteSettings object.
type SiteStatus struct {
	// ObservedGeneration is the generation of SiteSettings site the gateway last read (0: none
	// read, the file's settings are used).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Seed is the flow-hash seed the gateway's datapath runs with.
	Seed int64 `json:"seed"`
	// RestartPending lists the settings of the object the gateway runs with other values of
	// (the seed, the table size, the timeouts): they take effect when it restarts.
	// +optional
	// +listType=atomic
	RestartPending []string `json:"restartPending,omitempty"`
	// Error says why the object could not be read or used, if so.
	// +optional
	Error string `json:"error,omitempty"`
}

// DatapathStatus is a gateway's datapath.
type DatapathStatus struct {
	// Kind is xdp or afxdp.
	// +optional
	Kind string `json:"kind,omitempty"`
	// Forwarding is the forwarding mode: returnPath or dsr.
	// +optional
	Forwarding string `json:"forwarding,omitempty"`
	// Interfaces are the interfaces the datapath is attached to.
	// +optional
	Interfaces []string `json:"interfaces,omitempty"`
	// Healthy says whether the datapath is attached and its last update succeeded.
	// +optional
	Healthy bool `json:"healthy"`
	// Message says what is wrong when Healthy is false.
	// +optional
	Message string `json:"message,omitempty"`
}

// ReconcileStatus is one reconcile of a gateway.
type ReconcileStatus struct {
	// Time is when it ended.
	Time metav1.Time `json:"time"`
	// Services is how many services (of the file and of Kubernetes) it balanced.
	// +optional
	Services int32 `json:"services"`
	// Error is its error, empty when it succeeded.
	// +optional
	Error string `json:"error,omitempty"`
}

// BGPSessionStatus is one BGP session of a gateway.
type BGPSessionStatus struct {
	// Peer is the neighbour's address.
	Peer string `json:"peer"`
	// ASN is the neighbour's AS number.
	// +optional
	ASN int64 `json:"asn,omitempty"`
	// State is the session's state: Established, Active, Connect, Idle, OpenSent, OpenConfirm.
	// +optional
	State string `json:"state,omitempty"`
	// Since is when the session entered its state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// BFD is the BFD session's state (Up, Down, Init, AdminDown); empty without BFD.
	// +optional
	BFD string `json:"bfd,omitempty"`
	// Advertised is how many routes the session advertises.
	// +optional
	Advertised int32 `json:"advertised"`
	// LastError is the session's last error, if any.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// VIPStatus is a VIP address of a gateway, announced or withdrawn.
type VIPStatus struct {
	// Address is the VIP.
	Address string `json:"address"`
	// Services are the services that use it (namespace/name for Kubernetes Services).
	// +optional
	Services []string `json:"services,omitempty"`
	// Reason says why a VIP is withdrawn (e.g. too few healthy backends).
	// +optional
	Reason string `json:"reason,omitempty"`
}

// GatewayStatusList is a list of GatewayStatuses.
//
// +kubebuilder:object:root=true
type GatewayStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the gateways' objects.
	Items []GatewayStatus `json:"items"`
}
