// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/inspect"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// envAgentClient makes the test binary a client (see agentClient): connect to the address it
// holds ("addr*count") and print each answer on a line.
const envAgentClient = "XLB_AGENT_CLIENT"

// agentClient connects count times to addr and prints the server's answer (or the error's
// errno name) per connection.
func agentClient(spec string) int {
	addr, n := spec, 1
	if i := strings.LastIndex(spec, "*"); i >= 0 {
		addr = spec[:i]
		fmt.Sscan(spec[i+1:], &n)
	}
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			fmt.Println(netlab.ErrnoName(err))
			continue
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		fmt.Println(strings.TrimSpace(string(b)), c.RemoteAddr())
	}
	return 0
}

// envAgentHold makes the test binary a UDP client that holds one connected socket (see
// agentHold) to the address it holds.
const envAgentHold = "XLB_AGENT_HOLD"

// agentHold connects a UDP socket to addr, then asks on it once at start and once per line read
// from stdin, printing each answer, or the send's and the receive's errno names ("send/recv").
func agentHold(addr string) int {
	c, err := net.Dial("udp", addr)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	name := func(err error) string { return cmp.Or(netlab.ErrnoName(err), "-") }
	in := bufio.NewScanner(os.Stdin)
	for {
		buf := make([]byte, 64)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		_, werr := c.Write([]byte("who"))
		m, rerr := c.Read(buf)
		if werr != nil || rerr != nil {
			fmt.Println(name(werr) + "/" + name(rerr))
		} else {
			fmt.Println(string(buf[:m]))
		}
		if !in.Scan() {
			return 0
		}
	}
}

// TestAgentE2E runs `xlb agent` against a real kube-apiserver (cluster IPs from a lab range)
// as its own ServiceAccount with deploy/agent.yaml's RBAC, and a client process in the agent's
// cgroup reaching a ClusterIP Service whose endpoints are servers in a namespace. A Service
// claiming that cluster IP as an external IP (the cluster-IP takeover) does not get its
// connections, and gets an Event; its allowed external IP is balanced.
func TestAgentE2E(t *testing.T) {
	testAgentE2E(t, func(args []string) *exec.Cmd {
		agent := exec.Command(os.Args[0], args...)
		agent.Env = append(os.Environ(), envDaemon+"=1")
		return agent
	})
}

// testAgentE2E is TestAgentE2E with the agent started by launch (given xlb's arguments,
// "agent" first): the test binary itself, or xlb's image in containerd (TestImage).
func testAgentE2E(t *testing.T, launch func(args []string) *exec.Cmd) {
	if os.Getuid() != 0 {
		t.Fatal("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := kubetest.Start(ctx, kubetest.Options{Dir: t.TempDir(),
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
	sa := "system:serviceaccount:xlb-system:xlb-agent"
	if err := kubetest.WriteKubeconfig(kubeconfig, cp.As(sa, "system:serviceaccounts", "system:serviceaccounts:xlb-system")); err != nil {
		t.Fatal(err)
	}

	// Backends b10 and b11 on the loopback of a namespace that routes nothing else.
	ns := netlab.New(t, netlab.Prefix()+"ag")
	for name, a := range map[string]string{"b10": "198.18.1.10", "b11": "198.18.1.11", "b66": "198.18.1.66"} {
		ns.MustIP(t, "addr add "+a+"/32 dev lo")
		ns.ServeName(t, "tcp", netip.MustParseAddrPort(a+":8080"), name)
		ns.ServeName(t, "udp", netip.MustParseAddrPort(a+":5353"), name)
	}
	root, err := socklb.RootCgroup()
	if err != nil {
		t.Fatal(err)
	}
	cgroup := filepath.Join(root, "xlb-test-"+netlab.Prefix())
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netlab.RemoveCgroup(cgroup); err != nil {
			t.Error(err)
		}
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	pin := filepath.Join("/sys/fs/bpf", "xlb-test-"+netlab.Prefix())
	t.Cleanup(func() {
		if err := cleanupPins(pin); err != nil {
			t.Error(err)
		}
	})
	// startAgent starts `xlb agent` and returns what stops it (SIGTERM, then a wait for a
	// clean exit).
	startAgent := func() (stop func()) {
		t.Helper()
		agent := launch([]string{"agent", "--node", "n1", "--kubeconfig", kubeconfig, "--cgroup", cgroup,
			"--listen", listen, "--pin-path", pin, "--max-sockets", "16384", "--external-ip-allow", "198.18.99.0/24"})
		logs, err := agent.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(logs)
			for sc.Scan() {
				t.Logf("[agent] %s", sc.Text())
			}
			exited <- agent.Wait()
		}()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			agent.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("agent exited: %v", err)
				}
			case <-time.After(10 * time.Second):
				agent.Process.Kill()
				t.Error("agent did not stop within 10 s of SIGTERM")
			}
		}
		t.Cleanup(stop)
		return stop
	}
	stop := startAgent()

	// client runs the client in the namespace and the cgroup and returns its answers.
	client := func(spec string) []string {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", ns.Name, os.Args[0])
		cmd.Env = append(os.Environ(), envAgentClient+"="+spec)
		cg, err := netlab.InCgroup(cmd, cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer cg.Close()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		return strings.Fields(strings.TrimSpace(string(out)))
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 20 s: %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	svc, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80).String()
	t.Logf("service default/web: cluster IP %s", vip)
	eventually("a Service without endpoints refuses connections", func() bool {
		return strings.Join(client(vip), " ") == "ECONNREFUSED"
	})
	pn, port, yes := "http", int32(8080), true
	node := "n1"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.18.1.10"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"198.18.1.11"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		},
	}
	if sl, err = admin.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var answers []string
	eventually("connections to the cluster IP reach both endpoints, with the cluster IP as peer", func() bool {
		answers = client(vip + "*40")
		seen := map[string]bool{}
		for i := 0; i+1 < len(answers); i += 2 {
			if answers[i+1] != vip {
				return false
			}
			seen[answers[i]] = true
		}
		return len(answers) == 80 && seen["b10"] && seen["b11"] && len(seen) == 2
	})

	// The cluster-IP takeover: a Service named to sort first, its endpoint b66, with web's
	// cluster IP as an external IP on web's port. Its allowed external IP is balanced (the
	// agent has seen it), its claim on web's cluster IP is not: web's connections still reach
	// web's endpoints only, and the Service gets its Event from the agent's role.
	evil, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "aaa-evil"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			ExternalIPs: []string{svc.Spec.ClusterIP, "198.18.99.9"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "aaa-evil-1", Labels: map[string]string{discoveryv1.LabelServiceName: "aaa-evil"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.1.66"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("aaa-evil's allowed external IP reaches b66", func() bool {
		return strings.Join(client("198.18.99.9:80"), " ") == "b66 198.18.99.9:80"
	})
	answers = client(vip + "*40")
	if joined := strings.Join(answers, " "); len(answers) != 80 || strings.Contains(joined, "b66") {
		t.Errorf("web's cluster IP with aaa-evil claiming it: %v, want web's endpoints only", answers)
	}
	eventually("aaa-evil gets an ExternalIPRefused Event", func() bool {
		l, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=aaa-evil,reason=ExternalIPRefused"})
		return err == nil && len(l.Items) == 1 && strings.Contains(l.Items[0].Message, svc.Spec.ClusterIP+" is inside the service CIDR 198.18.96.0/24")
	})
	if err := admin.CoreV1().Services("default").Delete(ctx, evil.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("aaa-evil's external IP is no longer balanced", func() bool {
		return strings.Join(client("198.18.99.9:80"), " ") != "b66 198.18.99.9:80"
	})

	sl.Endpoints = sl.Endpoints[1:]
	if sl, err = admin.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually("after the slice update every connection reaches b11", func() bool {
		answers = client(vip + "*20")
		return strings.Count(strings.Join(answers, " "), "b11 "+vip) == 20
	})

	// A connected UDP socket whose endpoint leaves the Service is closed by the agent (it lives
	// in the namespace pinned in /run/netns, as a Pod's); the next socket reaches the endpoint
	// left.
	dns, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dnsIP := netip.AddrPortFrom(netip.MustParseAddr(dns.Spec.ClusterIP), 53).String()
	dnsName, dnsPort, udp := "dns", int32(5353), corev1.ProtocolUDP
	dsl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &dnsName, Port: &dnsPort, Protocol: &udp}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.1.10"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}
	if dsl, err = admin.DiscoveryV1().EndpointSlices("default").Create(ctx, dsl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var held *heldUDP
	eventually("a connected UDP socket to the dns Service reaches b10", func() bool {
		if held != nil {
			held.close()
		}
		held = holdUDP(t, ns, cgroup, dnsIP)
		return held.first == "b10"
	})
	dsl.Endpoints[0].Addresses = []string{"198.18.1.11"}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, dsl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The close may land between an ask's send and its receive: either errno says it.
	eventually("the agent closes the socket whose endpoint left", func() bool {
		got := held.ask()
		return strings.Contains(got, "EDESTADDRREQ") || strings.Contains(got, "ECONNABORTED")
	})
	held.close()
	if got := holdUDP(t, ns, cgroup, dnsIP); got.first != "b11" {
		t.Errorf("a new socket after the endpoint moved: %q, want b11", got.first)
	}

	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"xlb_agent_frontends 3" /* web, dns, and the apiserver's default/kubernetes */, `xlb_agent_socket_events_total{event="refused"}`, `xlb_agent_socket_events_total{event="connect"}`,
		`xlb_agent_socket_events_total{event="udp_closed"} 1`, "xlb_agent_scrape_errors 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if resp, err := http.Get("http://" + listen + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %v %v", resp, err)
	}

	// Stopped, the agent leaves balancing in place; a new one adopts it and catches up with
	// what changed meanwhile; xlb cleanup detaches it.
	stop()
	if got := client(vip + "*5"); strings.Count(strings.Join(got, " "), "b11 "+vip) != 5 {
		t.Errorf("with the agent stopped: %v, want b11 still", got)
	}
	// `xlb show agent` reads the pinned state with no agent running: web's frontend with its
	// one endpoint, the three frontends, and the connects counted.
	var out, errb bytes.Buffer
	if rc := showCLI([]string{"agent", "--json", "--pin-path", pin}, &out, &errb); rc != 0 {
		t.Errorf("xlb show agent: exit %d: %s", rc, errb.String())
	} else {
		var doc inspect.Agent
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(doc.Frontends, func(f inspect.AgentFrontend) bool { return f.Frontend == vip+"/TCP" })
		udp := slices.IndexFunc(doc.Frontends, func(f inspect.AgentFrontend) bool { return strings.HasSuffix(f.Frontend, ":53/UDP") })
		missing := slices.ContainsFunc(doc.Frontends, func(f inspect.AgentFrontend) bool { return f.MissingSlots != 0 })
		if len(doc.Frontends) != 3 || i < 0 || !slices.Equal(doc.Frontends[i].Endpoints, []string{"198.18.1.11:8080"}) ||
			udp < 0 || missing || doc.Attached != 8 || doc.Hooks != 8 || doc.Counters.Connects == 0 {
			t.Errorf("xlb show agent with the agent stopped:\n%s", out.String())
		}
	}
	out.Reset()
	if rc := showCLI([]string{"agent", "--pin-path", pin}, &out, &errb); rc != 0 ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(vip)+`/TCP +1 endpoint\n  198\.18\.1\.11:8080 *$`).MatchString(out.String()) {
		t.Errorf("xlb show agent: exit %d:\n%s", rc, out.String())
	}
	sl.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"198.18.1.10"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop = startAgent()
	eventually("the restarted agent follows the update made while it was down", func() bool {
		answers = client(vip + "*10")
		return strings.Count(strings.Join(answers, " "), "b10 "+vip) == 10
	})
	stop()
	if err := cleanupPins(pin); err != nil {
		t.Fatal(err)
	}
	if got := client(vip); strings.Join(got, " ") != "ENETUNREACH" {
		t.Errorf("after xlb cleanup: %v, want ENETUNREACH (not balanced)", got)
	}
}

// heldUDP is a running agentHold client.
type heldUDP struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	first string // its first answer
}

// holdUDP starts an agentHold client to addr in ns and cgroup and reads its first answer.
func holdUDP(t *testing.T, ns *netlab.NS, cgroup, addr string) *heldUDP {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns.Name, os.Args[0])
	cmd.Env = append(os.Environ(), envAgentHold+"="+addr)
	cg, err := netlab.InCgroup(cmd, cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &heldUDP{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(h.close)
	if h.out.Scan() {
		h.first = h.out.Text()
	}
	return h
}

// ask has the client ask once more on its socket and returns what it printed.
func (h *heldUDP) ask() string {
	if _, err := io.WriteString(h.in, "again\n"); err != nil || !h.out.Scan() {
		return "client gone"
	}
	return h.out.Text()
}

// close ends the client.
func (h *heldUDP) close() {
	h.in.Close()
	if h.cmd.Process != nil {
		h.cmd.Process.Kill()
	}
	h.cmd.Wait()
}

// TestAgentPrefixFlags: --external-ip-allow and --service-cidr take prefixes (a bare address
// is its /32 or /128) repeated or comma-separated, masked and without duplicates; anything
// else is refused, and so are both flags in file mode. (No root: refused before anything is
// loaded.)
func TestAgentPrefixFlags(t *testing.T) {
	var l prefixList
	for _, v := range []string{"198.18.99.0/24,2001:db8:99::/64", " 198.18.99.7/24 , 198.18.98.1", ""} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.String(); got != "198.18.99.0/24,2001:db8:99::/64,198.18.98.1/32" {
		t.Errorf("prefixes: %q", got)
	}
	for _, bad := range []string{"198.18.99.0/33", "eth0", "::ffff:198.18.99.0/120", "fe80::1%eth0"} {
		if err := new(prefixList).Set(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	var errb bytes.Buffer
	if rc := cli([]string{"agent", "--listen", "", "--node", "n1", "--external-ip-allow", "nope"}, &errb); rc == 0 || !strings.Contains(errb.String(), `"nope" is not an IP prefix`) {
		t.Errorf("--external-ip-allow nope: exit %d, %q", rc, errb.String())
	}
	errb.Reset()
	cfg := filepath.Join(t.TempDir(), "xlb.yaml")
	if err := os.WriteFile(cfg, []byte(dsrAgentConfig(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"agent", "--listen", "", "--config", cfg, "--node", "n1", "--dsr-interface", "n0", "--external-ip-allow", "198.18.99.0/24", "--service-cidr", "198.18.96.0/24"}
	if rc := cli(args, &errb); rc != 1 || !strings.Contains(errb.String(), "--external-ip-allow, --service-cidr: not flags of file mode") {
		t.Errorf("file mode with the policy's flags: exit %d, %q", rc, errb.String())
	}
}
