// SPDX-License-Identifier: Apache-2.0

// Package proxyhealth plays kube-proxy's two health servers, for the lab and the tests: the
// node server (kube-proxy's --healthz-bind-address, port 10256: /healthz and /livez) and the
// per-Service server on a Service's healthCheckNodePort. xlb probes both on every node for
// externalTrafficPolicy: Local Services (lb/kube's NodeProber), so the lab needs nodes that
// answer exactly as kube-proxy does.
//
// The protocol is copied from kube-proxy v1.37 (pkg/proxy/healthcheck: service_health.go and
// proxy_health.go), status codes, headers and bodies byte for byte. That package cannot be
// imported: it lives in k8s.io/kubernetes, whose go.mod requires every k8s.io staging module at
// v0.0.0 and resolves them with replace directives to ./staging, which do not apply when it is
// a dependency; using it would mean copying some thirty replace directives into xlb's go.mod and
// pulling klog, component-base, the proxy metrics and more, for two small HTTP handlers.
//
// What kube-proxy derives from its own state is set by hand here: [Server.SetHealthy] (whether
// the proxy's rules are in sync), [Server.SetEligible] (whether the Node is neither being
// deleted nor tainted ToBeDeletedByClusterAutoscaler) and [Server.SetLocalEndpoints] (how many
// ready endpoints of a Service run on this node).
package proxyhealth
