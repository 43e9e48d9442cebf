// Package agent is the node agent (xlb agent): it watches every Service and EndpointSlice of the
// cluster (lb/kube's Agent), plans each node's cluster IP frontends (lb.PlanConnect), applies
// them to the node's socket load balancer through lb/reconcile's ConnectReconciler, closes the
// connected UDP sockets whose endpoint went, and serves /metrics and /healthz.
//
// It sees the socket load balancer as a datapath.SocketLB only: cmd/xlb loads the concrete one
// (xdp/socklb) and hands it to Run, which owns it from then on. See docs/agent.md.
package agent
