// SPDX-License-Identifier: Apache-2.0

// Package agent is the node agent (xlb agent). In Kubernetes mode it watches every Service and
// EndpointSlice of the cluster through lb/kube's Agent, which plans the node's cluster IP
// frontends (lb.PlanConnect: which external IPs pass the policy, who has a frontend several
// Services claim), applies them to the node's socket load balancer through lb/reconcile's
// ConnectReconciler, and closes the connected UDP sockets whose endpoint went. With direct server
// return it also applies the {frontend, local endpoint} pairs of the gateways' LoadBalancer
// Services (lb.DSRServices) to the node side of DSR through lb/reconcile's DSRReconciler, attaches
// it to the uplinks and to the interfaces toward the node's Pods (the hairpin), and publishes the
// capability on its Node (kube.AnnotationDSR). In file mode (Options.ConfigPath) it runs direct
// server return alone, its pairs from the gateways' YAML file. It serves /metrics and /healthz.
//
// It sees its datapaths through the contract only (datapath.SocketLB, datapath.DSRDatapath):
// cmd/xlb loads the concrete ones (xdp/socklb, xdp/dsr) and hands them to Run, which owns them
// from then on. See docs/agent.md.
package agent
