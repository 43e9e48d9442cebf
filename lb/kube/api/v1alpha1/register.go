// SPDX-License-Identifier: Apache-2.0
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version name the API.
const (
	// Group is the API group of xlb's resources.
	Group = "xlb.dev"
	// Version is the version of this package's types.
	Version = "v1alpha1"
)

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// The resources (plural, lower case) of the group, as URLs and RBAC rules name them.
const (
	// ResourceAddressPools is AddressPool's resource.
	ResourceAddressPools = "addresspools"
	// ResourceBGPPeers is BGPPeer's resource.
	ResourceBGPPeers = "bgppeers"
	// ResourceBGPAdvertisements is BGPAdvertisement's resource.
	ResourceBGPAdvertisements = "bgpadvertisements"
	// ResourceSiteSettings is SiteSettings's resource.
	ResourceSiteSettings = "sitesettings"
	// ResourceGatewayStatuses is GatewayStatus's resource.
	ResourceGatewayStatuses = "gatewaystatuses"
)

// AddToScheme adds the types of this package to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&AddressPool{}, &AddressPoolList{},
		&GatewayStatus{}, &GatewayStatusList{},
		&BGPPeer{}, &BGPPeerList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
		&SiteSettings{}, &SiteSettingsList{},
	)
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
