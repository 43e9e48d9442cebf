// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/xdp/dsr"
	"github.com/xlb-dev/xlb/xdp/inspect"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// The file-mode agent's site: a node with its uplink n0 on a segment shared with a stand-in for
// the gateways and an outside client (ext), and two Pods behind it, each on its own veth and
// routed by a /32 (as Calico does). A is web's Pod, B dns's. ext sends the packets a gateway
// would: DNATed to the Pod, with the carrier, from the client's address (its own, or A's for
// the hairpin: A's connection to dns's VIP, picked on A's own node).
//
//	ext (g0 198.18.1.10) ~ n0 (198.18.1.2) node  v0 (198.18.6.1) ~ a0 Pod A 198.18.4.2
//	                                             v1 (198.18.6.2) ~ b0 Pod B 198.18.4.3
var (
	dsrExt  = netip.MustParseAddr("198.18.1.10")
	dsrPodA = netip.MustParseAddr("198.18.4.2")
	dsrPodB = netip.MustParseAddr("198.18.4.3")
	dsrDNS  = netip.MustParseAddrPort("198.18.100.1:53")
	dsrWeb  = netip.MustParseAddrPort("198.18.100.2:80")
)

// dsrAgentConfig is the gateways' file: web on Pod A, dns on Pod B (with dnsOnB) and on a Pod of
// another node.
func dsrAgentConfig(dnsOnB bool) string {
	s := `interfaces: [{name: gw0, role: both}]
datapath: {forwarding: dsr}
services:
  - name: web
    vips: [198.18.100.2]
    ports: [{port: 80, targetPort: 8080}]
    backends: [{address: 198.18.4.2, node: n1}]
  - name: dns
    vips: [198.18.100.1]
    ports: [{port: 53, protocol: UDP, targetPort: 5353}]
    backends:
      - {address: 198.18.9.9, node: n2}
`
	if dnsOnB {
		s += "      - {address: 198.18.4.3, node: n1}\n"
	}
	return s
}

// addDSRPod puts a Pod at addr behind node on veth side ~ pod (side has the node's address
// sideAddr), routed by a /32.
func addDSRPod(t *testing.T, node, pod *netlab.NS, side, podIf, mac string, sideAddr, addr netip.Addr) {
	t.Helper()
	netlab.Veth(t, node, side, "02:00:00:00:20:"+mac, pod, podIf, "02:00:00:00:21:"+mac)
	node.MustIP(t, "addr add "+sideAddr.String()+"/32 dev "+side)
	node.MustIP(t, "route add "+addr.String()+"/32 dev "+side+" src "+sideAddr.String())
	pod.MustIP(t, "addr add "+addr.String()+"/32 dev "+podIf)
	pod.MustIP(t, "route add "+sideAddr.String()+"/32 dev "+podIf+" scope link")
	pod.MustIP(t, "route add default via "+sideAddr.String()+" dev "+podIf)
}

// newDSRSite builds the site (see dsrExt); everything goes when t ends. B answers UDP on 5353
// with "b".
func newDSRSite(t *testing.T) (prefix string, ext, node, podA, podB *netlab.NS) {
	t.Helper()
	netlab.RequireRoot(t, "it builds namespaces and attaches BPF programs")
	p := netlab.Prefix()
	ext, node, podA, podB = netlab.New(t, p+"e"), netlab.New(t, p+"n"), netlab.New(t, p+"a"), netlab.New(t, p+"b")
	netlab.Veth(t, ext, "g0", "02:00:00:00:20:01", node, "n0", "02:00:00:00:20:02")
	ext.MustIP(t, "addr add "+dsrExt.String()+"/24 dev g0")
	ext.MustIP(t, "route add 198.18.4.0/24 via 198.18.1.2")
	node.MustIP(t, "addr add 198.18.1.2/24 dev n0")
	node.Forwarding(t)
	addDSRPod(t, node, podA, "v0", "a0", "0a", netip.MustParseAddr("198.18.6.1"), dsrPodA)
	addDSRPod(t, node, podB, "v1", "b0", "0b", netip.MustParseAddr("198.18.6.2"), dsrPodB)
	podB.ServeName(t, "udp", netip.AddrPortFrom(dsrPodB, 5353), "b")
	return p, ext, node, podA, podB
}

// sendCarried sends, from ns, the UDP datagram "q" from src to the Pod at dst as a gateway sends
// it: DNATed, with the carrier naming frontend vip (IPv4 option 0x9e), by a raw socket.
func sendCarried(t *testing.T, ns *netlab.NS, src, dst, vip netip.AddrPort) {
	t.Helper()
	const ihl = 28
	payload := []byte("q")
	pkt := make([]byte, ihl+8+len(payload))
	pkt[0] = 0x40 | ihl/4
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	pkt[6] = 0x40 // DF
	pkt[8], pkt[9] = 64, unix.IPPROTO_UDP
	copy(pkt[12:16], src.Addr().AsSlice())
	copy(pkt[16:20], dst.Addr().AsSlice())
	pkt[20], pkt[21] = 0x9e, 8
	binary.BigEndian.PutUint16(pkt[22:], vip.Port())
	copy(pkt[24:28], vip.Addr().AsSlice())
	binary.BigEndian.PutUint16(pkt[ihl:], src.Port())
	binary.BigEndian.PutUint16(pkt[ihl+2:], dst.Port())
	binary.BigEndian.PutUint16(pkt[ihl+4:], uint16(8+len(payload))) // checksum 0: none (IPv4)
	copy(pkt[ihl+8:], payload)
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) // IP_HDRINCL
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.Addr().As4()})
	})
	if err != nil {
		t.Fatalf("send the carried datagram %s -> %s: %v", src, dst, err)
	}
}

// carriedExchange sends a carried datagram from client (bound in clientNS) to dst through ext
// and returns the answer and where it came from ("" on a timeout).
func carriedExchange(t *testing.T, ext, clientNS *netlab.NS, client, dst, vip netip.AddrPort) (string, netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	if err := clientNS.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(client))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendCarried(t, ext, client, dst, vip)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", netip.AddrPort{}
	}
	return string(buf[:n]), netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
}

// nodeAgentListen is where the agents of these tests serve /metrics and /healthz: on the
// node namespace's loopback.
const nodeAgentListen = "127.0.0.1:9612"

// startNodeAgent starts `xlb agent --listen nodeAgentListen args...` in node's network
// namespace and the host's mount namespace (the pins), and waits until /healthz says it has
// applied what it serves. It is killed when t ends, if still running.
func startNodeAgent(t *testing.T, node *netlab.NS, args ...string) *daemonProc {
	t.Helper()
	d := &daemonProc{out: &logBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + node.Name, os.Args[0], "agent",
		"--listen", nodeAgentListen}, args...)...)
	d.cmd.Env = append(os.Environ(), envDaemon+"=1")
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start the agent: %v", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.kill(t)
		if t.Failed() {
			t.Logf("agent %d output:\n%s", d.cmd.Process.Pid, d.out)
		}
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		if code, _, err := node.HTTPGet(nodeAgentListen, "/healthz", reqTimeout); err == nil && code == http.StatusOK {
			return d
		}
		if d.exitedNow() || time.Now().After(deadline) {
			t.Fatalf("the agent is not healthy (exited %v):\n%s", d.exitedNow(), d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// showDSR runs `xlb show dsr --json` on the pins in dir.
func showDSR(t *testing.T, dir string) inspect.DSR {
	t.Helper()
	var out, errb bytes.Buffer
	if rc := showCLI([]string{"dsr", "--json", "--pin-path", dir}, &out, &errb); rc != 0 {
		t.Fatalf("xlb show dsr: exit %d: %s", rc, errb.String())
	}
	var doc inspect.DSR
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// dsrInterfaces and dsrPairs write a DSR document's interfaces ("n0=both v0=egress") and
// pairs ("frontend>endpoint ...").
func dsrInterfaces(doc inspect.DSR) string {
	var s []string
	for _, i := range doc.Interfaces {
		s = append(s, i.Name+"="+i.Direction)
	}
	return strings.Join(s, " ")
}

func dsrPairs(doc inspect.DSR) string {
	var s []string
	for _, p := range doc.Pairs {
		s = append(s, p.Frontend+">"+p.Endpoint)
	}
	return strings.Join(s, " ")
}

// TestAgentDSRFile runs `xlb agent` in file mode, as the lab does (--config with the gateways'
// file, --node, --dsr-interface, --dsr-pin-path, --listen), in a node's namespace with the real
// node side of direct server return:
//   - its pairs are the file's backends on the node; it attaches to the uplink both ways and
//     to the veths of the node's Pods egress only (xlb show dsr, /metrics);
//   - a carried datagram to Pod B is answered from the VIP, to a client outside and to Pod A
//     on the same node (the hairpin: the reply is rewritten on A's veth);
//   - SIGHUP applies a changed file (B's pair goes: its carriers are dropped), a bad file is
//     logged and changes nothing;
//   - a Pod's veth deleted is detached, made again is attached again (the rescan);
//   - killed, it leaves the datapath serving; the next agent adopts it; xlb cleanup removes it.
func TestAgentDSRFile(t *testing.T) {
	p, ext, node, podA, _ := newDSRSite(t)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "xlb.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(dsrAgentConfig(true))
	pin := filepath.Join("/sys/fs/bpf", "xlb-test-"+p+"-dsr")
	t.Cleanup(func() {
		if err := cleanupPins(pin); err != nil {
			t.Error(err)
		}
	})
	start := func(extra ...string) *daemonProc {
		t.Helper()
		return startNodeAgent(t, node, append([]string{"--config", cfg, "--node", "n1", "--dsr-interface", "n0",
			"--dsr-pin-path", pin, "--dsr-flows", "16384"}, extra...)...)
	}
	show := func() inspect.DSR { return showDSR(t, pin) }
	ifaces, pairs := dsrInterfaces, dsrPairs
	waitShow := func(what string, cond func(inspect.DSR) bool) inspect.DSR {
		t.Helper()
		deadline := time.Now().Add(pollTimeout)
		for {
			doc := show()
			if cond(doc) {
				return doc
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %s: interfaces %q, pairs %q", pollTimeout, what, ifaces(doc), pairs(doc))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	bothPairs := "198.18.100.1:53/UDP>198.18.4.3:5353 198.18.100.2:80/TCP>198.18.4.2:8080"
	extClient, aClient := netip.AddrPortFrom(dsrExt, 40001), netip.AddrPortFrom(dsrPodA, 40002)
	toB := netip.AddrPortFrom(dsrPodB, 5353)
	answered := func(clientNS *netlab.NS, client netip.AddrPort) bool {
		got, from := carriedExchange(t, ext, clientNS, client, toB, dsrDNS)
		return got == "b" && from == dsrDNS
	}

	a := start()
	doc := show()
	if got := ifaces(doc); got != "n0=both v0=egress v1=egress" {
		t.Errorf("interfaces %q, want the uplink both ways and both Pods' veths egress", got)
	}
	if got := pairs(doc); got != bothPairs {
		t.Errorf("pairs %q, want %q (n2's backend left out)", got, bothPairs)
	}
	if !answered(ext, extClient) {
		t.Error("the outside client's carried datagram to B was not answered from the VIP")
	}
	time.Sleep(50 * time.Millisecond) // the flows' clock is coarse: A's flow must be the later
	if !answered(podA, aClient) {
		t.Error("Pod A's carried datagram to B (the hairpin) was not answered from the VIP")
	}
	// A carrier for a frontend B does not serve is dropped.
	if got, _ := carriedExchange(t, ext, ext, extClient, toB, dsrWeb); got != "" {
		t.Errorf("a carrier of web's frontend to B was answered (%q)", got)
	}
	// xlb show dsr: the flows recorded (outside client and Pod A, to B through dns's VIP), the
	// most recently used first, as many as asked.
	var out, errb bytes.Buffer
	if rc := showCLI([]string{"dsr", "--pin-path", pin}, &out, &errb); rc != 0 {
		t.Fatalf("xlb show dsr: exit %d: %s", rc, errb.String())
	}
	text := out.String()
	for _, want := range []string{"interfaces: n0 both, v0 egress, v1 egress\n", "pairs: 2\n", "carrier_accepted", "flows: 2\n",
		"UDP    198.18.4.2:40002", "198.18.100.1:53  198.18.4.3:5353"} {
		if !strings.Contains(text, want) {
			t.Errorf("xlb show dsr lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if rc := showCLI([]string{"dsr", "--json", "--limit", "1", "--pin-path", pin}, &out, &errb); rc != 0 {
		t.Fatalf("xlb show dsr --limit 1: exit %d: %s", rc, errb.String())
	}
	var limited inspect.DSR
	if err := json.Unmarshal(out.Bytes(), &limited); err != nil {
		t.Fatal(err)
	}
	if limited.FlowsTotal != 2 || len(limited.Flows) != 1 || limited.Flows[0].Client != aClient.String() || limited.Flows[0].VIP != dsrDNS.String() {
		t.Errorf("xlb show dsr --limit 1: %+v, want Pod A's flow (the latest) of 2", limited.Flows)
	}
	code, body, err := node.HTTPGet(nodeAgentListen, "/metrics", reqTimeout)
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, want := range []string{"xlb_agent_dsr_pairs 2", `xlb_agent_dsr_interfaces{direction="both"} 1`, `xlb_agent_dsr_interfaces{direction="egress"} 2`,
		`xlb_agent_dsr_packets_total{counter="carrier_accepted"} 2`, `xlb_agent_dsr_packets_total{counter="reply_rewritten"} 2`,
		`xlb_agent_dsr_packets_total{counter="drop_carrier_not_allowed"} 1`, "xlb_agent_scrape_errors 0"} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}

	// SIGHUP: B leaves dns; a bad file changes nothing.
	write(dsrAgentConfig(false))
	a.signal(t, syscall.SIGHUP)
	waitShow("B's pair gone after the reload", func(d inspect.DSR) bool { return pairs(d) == "198.18.100.2:80/TCP>198.18.4.2:8080" })
	if answered(ext, extClient) {
		t.Error("a carrier for B's removed pair was answered")
	}
	write("interfaces: []\n")
	a.signal(t, syscall.SIGHUP)
	a.waitLog(t, "config reload rejected; still serving the previous pairs")
	write(dsrAgentConfig(true))
	a.signal(t, syscall.SIGHUP)
	waitShow("B's pair back", func(d inspect.DSR) bool { return pairs(d) == bothPairs })

	// Pod A goes and comes back: its veth is detached, then attached again, and the hairpin
	// works on the new one.
	node.MustIP(t, "link del v0")
	waitShow("v0 detached once deleted", func(d inspect.DSR) bool { return ifaces(d) == "n0=both v1=egress" })
	addDSRPod(t, node, podA, "v0", "a0", "0a", netip.MustParseAddr("198.18.6.1"), dsrPodA)
	waitShow("v0 attached once made again", func(d inspect.DSR) bool { return ifaces(d) == "n0=both v0=egress v1=egress" })
	if !answered(podA, aClient) {
		t.Error("the hairpin through Pod A's new veth was not answered from the VIP")
	}

	// Killed: the pinned datapath keeps serving; the next agent adopts its pairs and links.
	a.kill(t)
	if !answered(ext, extClient) || !answered(podA, aClient) {
		t.Error("with the agent killed, carried datagrams are not answered from the VIP")
	}
	if got := pairs(show()); got != bothPairs {
		t.Errorf("pairs with the agent killed: %q", got)
	}
	a = start()
	a.waitLog(t, `msg="direct server return attached" uplinks=[n0] pairs=2`)
	if !answered(podA, aClient) {
		t.Error("the hairpin after the restart was not answered from the VIP")
	}
	a.signal(t, syscall.SIGTERM)
	a.waitExit(t, "after SIGTERM")
	if !dsr.HasPins(pin) || !answered(ext, extClient) {
		t.Error("after SIGTERM the datapath is not pinned and serving")
	}
	if rc := cli([]string{"cleanup", "--pin-path", pin}, os.Stderr); rc != 0 {
		t.Fatalf("xlb cleanup: exit %d", rc)
	}
	if dsr.HasPins(pin) || answered(ext, extClient) {
		t.Error("after xlb cleanup the datapath is still pinned or serving")
	}
	// --cleanup-on-exit removes it at exit.
	a = start("--cleanup-on-exit")
	if got := pairs(show()); got != bothPairs {
		t.Errorf("pairs of a fresh agent: %q", got)
	}
	a.signal(t, syscall.SIGTERM)
	a.waitExit(t, "after SIGTERM")
	if dsr.HasPins(pin) {
		t.Error("with --cleanup-on-exit the datapath is still pinned")
	}
	if got := a.out.String(); !slices.ContainsFunc(strings.Split(got, "\n"), func(l string) bool {
		return strings.Contains(l, "direct server return stopped: carriers are no longer accepted on this node")
	}) {
		t.Errorf("the agent did not say it removed direct server return:\n%s", got)
	}
}

// TestAgentDSRFlags: --dsr-interface takes names repeated or comma-separated; file mode
// refuses the flags of Kubernetes mode and needs --dsr-interface; the two datapaths cannot
// share a pin directory. (No root: each is refused before anything is loaded.)
func TestAgentDSRFlags(t *testing.T) {
	var l nameList
	for _, v := range []string{"eth0,eth1", " eth1 , bond0", ""} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(l, nameList{"eth0", "eth1", "bond0"}) || l.String() != "eth0,eth1,bond0" {
		t.Errorf("--dsr-interface eth0,eth1 --dsr-interface ' eth1 , bond0': %q", l)
	}
	cfg := filepath.Join(t.TempDir(), "xlb.yaml")
	if err := os.WriteFile(cfg, []byte(dsrAgentConfig(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg, "--node", "n1", "--dsr-interface", "n0", "--pin-path", "/sys/fs/bpf/x", "--max-sockets", "16384"},
			"--max-sockets, --pin-path: not flags of file mode"},
		{[]string{"--config", cfg, "--node", "n1"}, "give the node's uplink with --dsr-interface"},
		{[]string{"--node", "n1", "--dsr-interface", "n0", "--pin-path", "/sys/fs/bpf/same", "--dsr-pin-path", "/sys/fs/bpf/same"},
			"--pin-path and --dsr-pin-path are both /sys/fs/bpf/same"},
	} {
		var errb bytes.Buffer
		if rc := cli(append([]string{"agent", "--listen", ""}, c.args...), &errb); rc != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("xlb agent %q: exit %d, %q; want exit 1 saying %q", c.args, rc, errb.String(), c.want)
		}
	}
}

// TestAgentDSRKube runs `xlb agent` in Kubernetes mode with --dsr-interface, as its
// ServiceAccount under deploy/agent.yaml, in a node's namespace where a real kube-apiserver runs
// too (on the namespace's loopback), with the real socket load balancer (on a cgroup of the
// test's) and node side of direct server return:
//   - the pairs are the node's endpoints of the gateways' class only; the interfaces toward the
//     Pods come from the Node's Pod CIDR too (Pod A is nobody's endpoint);
//   - once applied, xlb.dev/dsr=v1 is on the Node, and carried datagrams are answered from the
//     VIP to an outside client and to Pod A (the hairpin);
//   - SIGTERM leaves the annotation and the datapath serving; the next agent, with
//     --cleanup-on-exit, withdraws the annotation at exit and removes the datapath.
func TestAgentDSRKube(t *testing.T) {
	p, ext, node, podA, _ := newDSRSite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(), NetNS: node.Name,
		APIServerFlags: []string{"--service-cluster-ip-range=198.18.96.0/24"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Stop() })
	_, file, _, _ := runtime.Caller(0)
	for _, f := range []string{"rbac.yaml", "agent.yaml"} {
		if err := kubetest.ApplyFile(ctx, cp.Admin(), filepath.Join(filepath.Dir(file), "..", "..", "deploy", f)); err != nil {
			t.Fatalf("apply deploy/%s: %v", f, err)
		}
	}
	admin, err := kubernetes.NewForConfig(cp.Admin())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "agent.kubeconfig")
	// The agent of n1, as its Pod's bound token names it (the admission policy lets a token
	// that names no node change no Node).
	agentCfg := cp.As("system:serviceaccount:xlb-system:xlb-agent", "system:serviceaccounts", "system:serviceaccounts:xlb-system")
	agentCfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}
	if err := kubetest.WriteKubeconfig(kubeconfig, agentCfg); err != nil {
		t.Fatal(err)
	}
	for name, cidr := range map[string]string{"n1": "198.18.4.0/24", "n2": "198.18.9.0/24"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotation := func() string {
		n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[kube.AnnotationDSR]
	}
	// dns (the gateways' class) on B and on n2; other (another class) on B too.
	no, udp, yes := false, corev1.ProtocolUDP, true
	for name, c := range map[string]struct{ class, vip string }{"dns": {kube.DefaultClass, "198.18.100.1"}, "other": {"example.org/lb", "198.18.100.9"}} {
		class := c.class
		s, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: &no,
				Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: udp, TargetPort: intstr.FromInt32(5353)}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: c.vip}}
		if _, err := admin.CoreV1().Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pn, port, n1, n2 := "dns", int32(5353), "n1", "n2"
		if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port, Protocol: &udp}},
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{dsrPodB.String()}, NodeName: &n1, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
				{Addresses: []string{"198.18.9.9"}, NodeName: &n2, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	root, err := socklb.RootCgroup()
	if err != nil {
		t.Fatal(err)
	}
	cgroup := filepath.Join(root, "xlb-test-"+p)
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netlab.RemoveCgroup(cgroup); err != nil {
			t.Error(err)
		}
	})
	sockPin, dsrPin := filepath.Join("/sys/fs/bpf", "xlb-test-"+p+"-agent"), filepath.Join("/sys/fs/bpf", "xlb-test-"+p+"-dsr")
	for _, pin := range []string{sockPin, dsrPin} {
		t.Cleanup(func() {
			if err := cleanupPins(pin); err != nil {
				t.Error(err)
			}
		})
	}
	start := func(extra ...string) *daemonProc {
		t.Helper()
		return startNodeAgent(t, node, append([]string{"--node", "n1", "--kubeconfig", kubeconfig, "--cgroup", cgroup,
			"--pin-path", sockPin, "--max-sockets", "16384", "--dsr-interface", "n0", "--dsr-pin-path", dsrPin, "--dsr-flows", "16384"}, extra...)...)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(pollTimeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %s", pollTimeout, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	extClient, aClient := netip.AddrPortFrom(dsrExt, 40011), netip.AddrPortFrom(dsrPodA, 40012)
	answered := func(clientNS *netlab.NS, client netip.AddrPort) bool {
		got, from := carriedExchange(t, ext, clientNS, client, netip.AddrPortFrom(dsrPodB, 5353), dsrDNS)
		return got == "b" && from == dsrDNS
	}

	a := start()
	eventually("xlb.dev/dsr=v1 on the Node", func() bool { return annotation() == kube.DSRCarrierVersion })
	doc := showDSR(t, dsrPin)
	if got, want := dsrPairs(doc), "198.18.100.1:53/UDP>198.18.4.3:5353"; got != want {
		t.Errorf("pairs %q, want %q (n2's endpoint and the other class's Service left out)", got, want)
	}
	eventually("the uplink both ways, both Pods' veths egress (A's through the Pod CIDR)", func() bool {
		return dsrInterfaces(showDSR(t, dsrPin)) == "n0=both v0=egress v1=egress"
	})
	if !answered(ext, extClient) {
		t.Error("the outside client's carried datagram to B was not answered from the VIP")
	}
	if !answered(podA, aClient) {
		t.Error("Pod A's carried datagram to B (the hairpin) was not answered from the VIP")
	}
	a.signal(t, syscall.SIGTERM)
	a.waitExit(t, "after SIGTERM")
	if annotation() != kube.DSRCarrierVersion || !answered(ext, extClient) {
		t.Error("after SIGTERM the annotation is gone or the datapath does not serve")
	}
	a = start("--cleanup-on-exit")
	a.waitLog(t, `msg="direct server return attached" uplinks=[n0] pairs=1`)
	a.signal(t, syscall.SIGTERM)
	a.waitExit(t, "after SIGTERM")
	if annotation() != "" || dsr.HasPins(dsrPin) || answered(ext, extClient) {
		t.Errorf("after --cleanup-on-exit: annotation %q, pinned %v; want withdrawn and removed", annotation(), dsr.HasPins(dsrPin))
	}
}
