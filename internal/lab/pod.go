// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// Pod is a pod namespace ("eth0" to its node) with its servers, each listening on both
// families:
//
//	TargetHTTP/tcp  HTTP: "/" answers WhoLine, "/healthz" answers "ok" (the gateways' health check),
//	                GET "/bytes/<n>" n bytes (a download), POST "/bytes/" the body's length (an upload);
//	                the same on the ExtraHTTPPorts after it (8081-8089), for Services that must not
//	                share a Pod port (see docs/datapath.md, Reverse NAT)
//	TargetHTTP/udp  "who": answers every datagram with WhoLine
//	TargetEcho/tcp  echo
//	TargetEcho/udp  echo
type Pod struct {
	Index        int
	Name         string // "p1"
	Node         *Node
	NS           *netlab.NS
	Addr4, Addr6 netip.Addr
	// Labels are the pod's labels (Kubernetes mode: Services select pods by them; AddPod gives
	// LabelApp: DefaultApp).
	Labels map[string]string

	mu       sync.Mutex
	state    PodState // its endpoint conditions (Kubernetes mode), under mu
	closers  []io.Closer
	conns    map[net.Conn]bool
	stopped  bool
	wg       sync.WaitGroup
	requests map[string]int // answered HTTP requests and who datagrams, by client family
}

// State returns the pod's endpoint conditions (Kubernetes mode).
func (p *Pod) State() PodState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *Pod) setState(st PodState) {
	p.mu.Lock()
	p.state = st
	p.mu.Unlock()
}

// WhoLine is what a pod's HTTP and who servers answer: the pod, its node, the pod address the
// request was sent to, and the client address and port the pod saw.
func WhoLine(pod, node string, podAddr netip.Addr, client netip.AddrPort) string {
	return fmt.Sprintf("pod %s on node %s (%s) saw client %s\n", pod, node, podAddr, client)
}

var whoRE = regexp.MustCompile(`^pod (\S+) on node (\S+) \((\S+)\) saw client (\S+)\n?$`)

// Answer is a parsed WhoLine.
type Answer struct {
	Pod, Node string
	PodAddr   netip.Addr
	Client    netip.AddrPort // the client address the pod saw
}

// ParseAnswer parses a WhoLine.
func ParseAnswer(s string) (Answer, error) {
	m := whoRE.FindStringSubmatch(s)
	if m == nil {
		return Answer{}, fmt.Errorf("not a pod's answer: %q", s)
	}
	pa, err := netip.ParseAddr(m[3])
	if err != nil {
		return Answer{}, fmt.Errorf("answer %q: %w", s, err)
	}
	ca, err := netip.ParseAddrPort(m[4])
	if err != nil {
		return Answer{}, fmt.Errorf("answer %q: %w", s, err)
	}
	return Answer{Pod: m[1], Node: m[2], PodAddr: pa, Client: ca}, nil
}

func unmapAddrPort(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func (p *Pod) who(local, remote net.Addr) string {
	return WhoLine(p.Name, p.Node.Name, unmapAddrPort(local).Addr(), unmapAddrPort(remote))
}

// startServers opens the pod's sockets inside its namespace and serves them.
func (p *Pod) startServers() error {
	p.conns = map[net.Conn]bool{}
	p.requests = map[string]int{}
	var lns []net.Listener
	var pcs []net.PacketConn
	err := p.NS.Do(func() error {
		ports := []int{TargetHTTP, TargetEcho}
		for i := 1; i <= ExtraHTTPPorts; i++ {
			ports = append(ports, TargetHTTP+i)
		}
		for _, port := range ports {
			ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		for _, port := range []int{TargetHTTP, TargetEcho} {
			pc, err := net.ListenPacket("udp", ":"+strconv.Itoa(port))
			if err != nil {
				return err
			}
			pcs = append(pcs, pc)
		}
		return nil
	})
	if err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		for _, pc := range pcs {
			pc.Close()
		}
		return fmt.Errorf("pod %s: open sockets: %w", p.Name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	// GET /bytes/<n>: n bytes (at most MaxBody), full-size segments from the pod to the
	// client; POST /bytes/: the upload's length (path MTU tests).
	mux.HandleFunc("/bytes/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost { // an upload: answer how many bytes came
			n, err := io.Copy(io.Discard, io.LimitReader(r.Body, MaxBody+1))
			if err != nil || n > MaxBody {
				http.Error(w, fmt.Sprintf("upload: %d bytes read: %v", n, err), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d\n", n)
			return
		}
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
		if err != nil || n < 0 || n > MaxBody {
			http.Error(w, fmt.Sprintf("want /bytes/<0 to %d>", MaxBody), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("xlb-lab!"), 8192) // 64 KiB
		for n > 0 {
			m := min(n, len(chunk))
			if _, err := w.Write(chunk[:m]); err != nil {
				return
			}
			n -= m
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		remote, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		if err != nil || local == nil {
			http.Error(w, "no address", http.StatusInternalServerError)
			return
		}
		p.count(remote.AddrPort().Addr().Unmap())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, p.who(local, remote))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	p.closers = append(p.closers, srv)
	for i, ln := range lns {
		if i == 1 {
			continue // echo
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = srv.Serve(ln)
		}()
	}
	echo := lns[1]
	p.closers = append(p.closers, echo)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.serveEcho(echo)
	}()
	for i, pc := range pcs {
		p.closers = append(p.closers, pc)
		whoServer := i == 0
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				out := buf[:n]
				if whoServer {
					// The socket is bound to every address: name the pod's address of the
					// client's family.
					client := unmapAddrPort(from)
					pa := p.Addr6
					if client.Addr().Is4() {
						pa = p.Addr4
					}
					p.count(client.Addr())
					out = []byte(WhoLine(p.Name, p.Node.Name, pa, client))
				}
				_, _ = pc.WriteTo(out, from)
			}
		}()
	}
	return nil
}

func (p *Pod) count(client netip.Addr) {
	fam := "ipv6"
	if client.Is4() {
		fam = "ipv4"
	}
	p.mu.Lock()
	p.requests[fam]++
	p.mu.Unlock()
}

// Requests returns how many HTTP requests and who datagrams the pod answered, per client
// family ("ipv4", "ipv6").
func (p *Pod) Requests() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.requests {
		out[k] = v
	}
	return out
}

func (p *Pod) serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = true
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(c, c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			c.Close()
		}()
	}
}

// StopServers closes every server socket and every open connection, and waits for the
// server goroutines. Clients then see resets.
func (p *Pod) StopServers() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	var errs []error
	for _, c := range p.closers {
		errs = append(errs, c.Close())
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	_ = errors.Join(errs...)
	p.wg.Wait()
}

// StartServers starts the pod's servers again after StopServers (a pod coming back: its health
// checks pass again). No-op while they run.
func (p *Pod) StartServers() error {
	p.mu.Lock()
	if !p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = false
	p.closers = nil
	p.mu.Unlock()
	return p.startServers()
}
