// SPDX-License-Identifier: Apache-2.0

// Package kube turns Kubernetes Services, EndpointSlices and Nodes into the lb model and runs
// xlb's LoadBalancer-class controller.
//
// [ServiceModel] maps one Service and its EndpointSlices to an [lb.Service]; [IPRequest] reads
// what addresses a Service asks for; [NodeHealth] probes kube-proxy's health servers on the nodes
// so that externalTrafficPolicy: Local Services send new flows only to endpoints on healthy
// nodes. What the Service gets wrong is returned as [Problem]s, which the controller shows to
// users as Events; a Problem never stops the rest of the Service from working.
//
// For the node agent, [Agent] models every Service's cluster IPs ([ClusterIPModel]) and the
// gateways' LoadBalancer Services ([LoadBalancerModel], for direct server return), and
// [SetNodeDSR] publishes the node's direct server return capability ([AnnotationDSR]), which
// the controller reads back into each backend (lb.Backend.DSR) and shows on Services as
// [ConditionDSR] and [ReasonDSRFallback].
package kube
