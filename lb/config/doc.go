// SPDX-License-Identifier: Apache-2.0

// Package config parses the standalone daemon's YAML config file into a [Config]: the
// interfaces to attach to, the datapath's load options, the HTTP listen address, logging, the
// services, as lb.Service values ready for lb.Plan, with their health checks, and the BGP
// speaker's settings. It is pure Go: it imports nothing of the kernel; the datapath settings are
// the datapath contract's own types (datapath.Settings, datapath.AttachMode).
//
// deploy/xlb.example.yaml is the reference: every field, commented, in a file that
// parses (a test keeps it so, and checks that it sets every field the parser knows). Each Go
// field's doc comment names its YAML key, its default and its bounds. The service keys fill
// lb.Service:
//
//	services[].name                    lb.Service.Name (required, unique)
//	services[].vips                    lb.Service.VIPs (required, at least one; IPv4 and/or IPv6)
//	services[].ports[]                 lb.Service.Ports (required, at least one)
//	    name, port, protocol, targetPort   lb.Port (port required, 0 = every port; protocol TCP or UDP, default TCP)
//	services[].backends[]              lb.Service.Backends (may be empty)
//	    address, weight, state, node, targetPorts, dsr   lb.Backend (weight default 1; state active or
//	                                   draining; dsr default true: its host serves the node side of
//	                                   direct server return, used with datapath.forwarding: dsr)
//	services[].sessionAffinity         lb.Service.Affinity: None (default) or ClientIP
//	services[].sessionAffinityTimeout  lb.Service.AffinityTimeout: ClientIP only, default 3h, at most 24h
//	services[].sourceRanges            lb.Service.SourceRanges: prefixes without host bits
//	services[].externalTrafficPolicy   lb.Service.TrafficPolicy: Cluster (default) or Local
//	services[].maglevTableSize         lb.Service.TableSize: a prime; default datapath.maglevTableSize
//	services[].healthCheck             Config.HealthChecks[name] (see HealthCheck)
//	services[].bgp                     lb.Service.Route: communities, largeCommunities, localPref, med
//	                                   added to the bgp section's on the routes of the service's VIPs
//
// The optional bgp section ([BGP]) configures the embedded BGP speaker: routerID, asn,
// listenPort, gracefulRestart, minHealthyBackends (default 1), withdrawOnExit (default true: a
// clean stop withdraws the routes; false keeps them at the routers for gracefulRestart),
// communities, largeCommunities, localPref, med (applied to every VIP route), and peers[]
// (address, asn, port, passwordFile, multihopTTL, holdTime, keepaliveTime, connectRetry,
// passive, localAddress). The peers and the large communities are parsed into the pure bgp
// package's types (bgp.Peer, bgp.LargeCommunity), which the speaker takes as they are; this
// package does not import the speaker (bgp/speaker) and so nothing of GoBGP or the kernel.
// Parse checks what the speaker would refuse (an IPv6 routerID, AS 0, timers that are not
// whole seconds or a keepalive not below the hold time, a passive peer without listenPort, a
// duplicate peer) and reads each password file, so an unreadable or empty one is an error with
// the file's line.
//
// # Strictness
//
// Parse accepts only what it understands: an unknown field, a field set twice, a value of the
// wrong type (a quoted number where an integer belongs, a number where a duration belongs), an
// unknown enum value, a duration without a unit, a negative size or an address that does not
// parse is an error, never a silently ignored or defaulted value. A null field ("key:" with
// nothing after it) counts as absent. Anchors, aliases and merge keys (<<: *defaults) work as
// YAML defines them; a file holds one YAML document.
//
// Within a service it checks everything lb.Service.Validate does (and then runs Validate as a
// safety net), plus: every VIP of a service with sourceRanges has a range of its family (as
// lb.Plan requires), every backend has a VIP of its family, and targetPorts name ports of the
// service. Across services it checks only that names are unique: a VIP and port claimed by two
// services is lb.Plan's to report.
//
// # Errors
//
// Parse reports every error it finds, not just the first, so that one edit can fix them all:
// up to 20, sorted by line and joined with errors.Join, each an [*Error] whose message reads
//
//	xlb.yaml:14: services[0].ports[1].protocol: unknown protocol "SCTPX" (want TCP or UDP)
//
// A mistake is reported once: a value that failed its own check is not checked again against
// others (a backend's targetPorts are not matched against ports that did not parse). YAML
// syntax errors carry yaml.v3's message and the file's line, without a field path.
package config
