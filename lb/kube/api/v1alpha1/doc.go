// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 is xlb's Kubernetes API, group xlb.dev, version v1alpha1: the custom
// resources a cluster operator configures xlb with (AddressPool) and the ones each gateway
// reports on (GatewayStatus). The CustomResourceDefinitions in deploy/helm/xlb/crds are
// generated from these types by controller-gen (make generate): their structural schemas,
// printer columns and CEL validation rules come from the markers below, so the apiserver itself
// refuses a bad object with a message that names the field — there is no webhook to run.
//
// The types carry no behaviour; lb/kube reads and writes them, and lb/kube/objects converts
// them to the pure model (lb/ipam).
//
// +kubebuilder:object:generate=true
// +groupName=xlb.dev
package v1alpha1
