module github.com/xlb-dev/xlb

go 1.26

require (
	github.com/cilium/ebpf v0.22.0
	golang.org/x/sys v0.43.0
)

require (
	github.com/google/gopacket v1.1.19 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
