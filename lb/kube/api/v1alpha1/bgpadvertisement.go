// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPAdvertisement holds BGP attributes added to every VIP route of the gateways it selects,
// on top of each gateway's file (bgp section) and of each pool's (AddressPool spec.bgp):
// communities and large communities are added; a LOCAL_PREF or MED set here applies unless
// the gateway's file sets its own (the file wins, and the clash is listed on the gateway's
// GatewayStatus). Two BGPAdvertisements of one gateway setting different LOCAL_PREFs (or
// MEDs): the older wins. A change applies at the gateway's next reconcile, without resetting
// any session (the routes are re-announced with the new attributes).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=xadv,categories=xlb
// +kubebuilder:printcolumn:name="Communities",type=string,JSONPath=`.spec.communities`
// +kubebuilder:printcolumn:name="LocalPref",type=integer,JSONPath=`.spec.localPref`
// +kubebuilder:printcolumn:name="MED",type=integer,JSONPath=`.spec.med`
// +kubebuilder:printcolumn:name="Gateways",type=string,JSONPath=`.spec.gateways`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the attributes and the gateways they apply to.
	Spec BGPAdvertisementSpec `json:"spec"`
}

// BGPAdvertisementSpec is route attributes and the gateways that use them.
type BGPAdvertisementSpec struct {
	RouteAttributes `json:",inline"`

	// NodeSelector selects the gateways that are Nodes by their Node's labels (the Node named
	// like the gateway). With Gateways, a gateway matching either uses the attributes.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Gateways lists gateways by name (kubernetes.gatewayName). With neither this nor
	// nodeSelector every gateway uses the attributes.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Gateways []string `json:"gateways,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisements.
//
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the advertisements.
	Items []BGPAdvertisement `json:"items"`
}
