// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestTCPListenerClosedGoesDown(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			srv := listenTCP(t, network)
			c, rec := start(t, Options{})
			chk := Check{Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond, Fall: 3}
			mustSet(t, c, Target{Key: "web", Addr: srv.addr(), Check: chk})

			u := rec.expect("web", 1, Healthy)
			if u.Reason != "first probe succeeded" {
				t.Errorf("reason %q", u.Reason)
			}
			closed := time.Now()
			srv.close()
			u = rec.expect("web", 2, Unhealthy)
			// Three failed probes after the close, each at most Interval×(1+Jitter) apart: the
			// bound catches a schedule that waits far longer (a lost wake-up, an interval
			// misread), with a second of slack for a loaded machine, where each probe's start
			// may be late and the lateness adds up over the three.
			limit := time.Duration(float64(3*chk.Interval)*(1+DefaultJitter)) + time.Second
			if took := u.at.Sub(closed); took > limit {
				t.Errorf("went down %v after the close, expected within %v", took, limit)
			}
			if !strings.HasPrefix(u.Reason, "3 consecutive probes failed, the last: tcp probe of "+srv.addr().String()) ||
				!strings.Contains(u.Reason, "connection refused") {
				t.Errorf("reason %q", u.Reason)
			}
			st, _ := c.Status("web")
			if st.Health != Unhealthy || st.Failures < 3 || st.Successes != 0 || st.LastError == nil {
				t.Errorf("status %+v", st)
			}
		})
	}
}

func TestTCPPortFromCheck(t *testing.T) {
	srv := listenTCP(t, "tcp4")
	c, rec := start(t, Options{})
	addr := netip.AddrPortFrom(srv.addr().Addr(), 0)
	mustSet(t, c, Target{Key: "k", Addr: addr, Check: fast(Check{Port: srv.addr().Port()})})
	rec.expect("k", 1, Healthy)
	for deadline := time.Now().Add(waitLimit); srv.accepted.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the listener accepted no probe")
		}
	}
}

// statusServer is a loopback HTTP server answering every request with its current status.
type statusServer struct {
	*httptest.Server
	status   atomic.Int32
	requests atomic.Int64
	last     atomic.Pointer[http.Request]
}

func newStatusServer(t *testing.T, tls bool) *statusServer {
	s := &statusServer{}
	s.status.Store(http.StatusOK)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.last.Store(r)
		w.WriteHeader(int(s.status.Load()))
		_, _ = w.Write([]byte("body the probe does not read\n"))
	})
	s.Server = httptest.NewUnstartedServer(h)
	// The probes that must fail (plain HTTP to HTTPS, unverified certificates) make the server
	// log errors: they are expected.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *statusServer) addr() netip.AddrPort { return addrPort(s.Listener.Addr()) }

func TestHTTPRiseAndFall(t *testing.T) {
	srv := newStatusServer(t, false)
	c, rec := start(t, Options{})
	chk := fast(Check{Kind: HTTP, Path: "/healthz?verbose=1", Rise: 2, Fall: 3})
	mustSet(t, c, Target{Key: "web", Addr: srv.addr(), Check: chk})

	rec.expect("web", 1, Healthy)
	r := srv.last.Load()
	if r.URL.RequestURI() != "/healthz?verbose=1" || r.Host != srv.addr().String() || r.UserAgent() != userAgent || !r.Close {
		t.Errorf("probe request: %s %s Host %q User-Agent %q Close %v", r.Method, r.URL, r.Host, r.UserAgent(), r.Close)
	}

	srv.status.Store(http.StatusServiceUnavailable)
	u := rec.expect("web", 2, Unhealthy)
	if want := "3 consecutive probes failed, the last: http probe of " + srv.addr().String() +
		": GET /healthz?verbose=1: status 503, expected 200"; u.Reason != want {
		t.Errorf("reason\n got %q\nwant %q", u.Reason, want)
	}

	srv.status.Store(http.StatusOK)
	before := srv.requests.Load()
	u = rec.expect("web", 3, Healthy)
	if u.Reason != "2 consecutive probes succeeded" {
		t.Errorf("reason %q", u.Reason)
	}
	if n := srv.requests.Load() - before; n < 2 {
		t.Errorf("healthy again after %d successful probes, expected Rise = 2", n)
	}
	if st, _ := c.Status("web"); st.LastError != nil || st.Successes < 2 || st.LastDuration <= 0 || st.LastProbe.IsZero() {
		t.Errorf("status %+v", st)
	}
}

func TestHTTPExpectStatusAndHost(t *testing.T) {
	srv := newStatusServer(t, false)
	srv.status.Store(http.StatusNoContent)
	c, rec := start(t, Options{})
	mustSet(t, c,
		Target{Key: "204", Addr: srv.addr(), Check: fast(Check{Kind: HTTP, ExpectStatus: 204, Host: "web.example"})},
		Target{Key: "200", Addr: srv.addr(), Check: fast(Check{Kind: HTTP})},
	)
	rec.expect("204", 1, Healthy)
	u := rec.expect("200", 1, Unhealthy)
	if !strings.HasSuffix(u.Reason, "GET /: status 204, expected 200") || !strings.HasPrefix(u.Reason, "first probe failed: ") {
		t.Errorf("reason %q", u.Reason)
	}
	var sawHost bool
	for range 100 {
		if r := srv.last.Load(); r != nil && r.Host == "web.example" {
			sawHost = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !sawHost {
		t.Error(`no request with "Host: web.example"`)
	}
}

func TestHTTPS(t *testing.T) {
	srv := newStatusServer(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	// With the test CA: skipping verification, verifying the IP, and verifying a name.
	c, rec := start(t, Options{RootCAs: roots})
	mustSet(t, c,
		Target{Key: "insecure", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS})},
		Target{Key: "verified", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS, VerifyTLS: true})},
		Target{Key: "verified-name", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS, VerifyTLS: true, Host: "example.com"})},
		Target{Key: "wrong-name", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS, VerifyTLS: true, Host: "wrong.test"})},
		Target{Key: "plain-http", Addr: srv.addr(), Check: fast(Check{Kind: HTTP})},
	)
	// With the system's roots the test CA is unknown: verification fails, skipping it does not.
	c2, rec2 := start(t, Options{})
	mustSet(t, c2,
		Target{Key: "insecure", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS})},
		Target{Key: "verified", Addr: srv.addr(), Check: fastTLS(Check{Kind: HTTPS, VerifyTLS: true})},
	)

	rec.expect("insecure", 1, Healthy)
	rec.expect("verified", 1, Healthy)
	rec.expect("verified-name", 1, Healthy)
	if u := rec.expect("wrong-name", 1, Unhealthy); !strings.Contains(u.Reason, "tls handshake") || !strings.Contains(u.Reason, "wrong.test") {
		t.Errorf("wrong-name reason %q", u.Reason)
	}
	if u := rec.expect("plain-http", 1, Unhealthy); !strings.Contains(u.Reason, "status 400") {
		t.Errorf("plain-http reason %q", u.Reason)
	}

	rec2.expect("insecure", 1, Healthy)
	u := rec2.expect("verified", 1, Unhealthy)
	if !strings.Contains(u.Reason, "tls handshake") || !strings.Contains(u.Reason, "certificate") {
		t.Errorf("verified reason %q", u.Reason)
	}
}

// silentServer accepts TCP connections and holds them open without a word until the test ends.
func silentServer(t *testing.T) netip.AddrPort {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return addrPort(ln.Addr())
}

func TestTimeoutIsAFailure(t *testing.T) {
	addr := silentServer(t)
	c, rec := start(t, Options{})
	timeout := 50 * time.Millisecond
	mustSet(t, c,
		Target{Key: "http", Addr: addr, Check: Check{Kind: HTTP, Interval: 100 * time.Millisecond, Timeout: timeout}},
		Target{Key: "https", Addr: addr, Check: Check{Kind: HTTPS, Interval: 100 * time.Millisecond, Timeout: timeout}},
		Target{Key: "tcp", Addr: addr, Check: Check{Interval: 100 * time.Millisecond, Timeout: timeout}},
	)
	rec.expect("tcp", 1, Healthy) // the connection itself is accepted
	for _, key := range []string{"http", "https"} {
		u := rec.expect(key, 1, Unhealthy)
		if !strings.HasSuffix(u.Reason, " (timeout 50ms)") {
			t.Errorf("%s reason %q", key, u.Reason)
		}
		st, _ := c.Status(key)
		if !errors.Is(st.LastError, context.DeadlineExceeded) {
			t.Errorf("%s: LastError %v does not match context.DeadlineExceeded", key, st.LastError)
		}
		if st.LastDuration < timeout || st.LastDuration > timeout+500*time.Millisecond {
			t.Errorf("%s: the probe took %v with a %v timeout", key, st.LastDuration, timeout)
		}
	}
}

// udpServer answers each datagram on a loopback UDP socket with reply(datagram), or not at all
// when that is nil.
func udpServer(t *testing.T, network string, reply func([]byte) []byte) netip.AddrPort {
	pc, err := net.ListenPacket(network, loopback(t, network)+":0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if r := reply(buf[:n]); r != nil {
				_, _ = pc.WriteTo(r, from)
			}
		}
	}()
	t.Cleanup(func() { _ = pc.Close(); <-done })
	return addrPort(pc.LocalAddr())
}

// closedUDPPort returns a loopback UDP address where nothing listens (it was just closed).
func closedUDPPort(t *testing.T, network string) netip.AddrPort {
	pc, err := net.ListenPacket(network, loopback(t, network)+":0")
	if err != nil {
		t.Fatal(err)
	}
	a := addrPort(pc.LocalAddr())
	_ = pc.Close()
	return a
}

func TestUDP(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		t.Run(network, func(t *testing.T) {
			echo := udpServer(t, network, func(b []byte) []byte { return b })
			pong := udpServer(t, network, func(b []byte) []byte { return append([]byte("PONG "), b...) })
			silent := udpServer(t, network, func([]byte) []byte { return nil })
			closed := closedUDPPort(t, network)
			c, rec := start(t, Options{})
			ping := []byte("ping")
			mustSet(t, c,
				Target{Key: "echo-any", Addr: echo, Check: fast(Check{Kind: UDP, Payload: ping})},
				Target{Key: "echo-expect", Addr: echo, Check: fast(Check{Kind: UDP, Payload: ping, Expect: []byte("ing")})},
				Target{Key: "pong", Addr: pong, Check: fast(Check{Kind: UDP, Payload: ping, Expect: []byte("PONG")})},
				Target{Key: "wrong-reply", Addr: echo, Check: fast(Check{Kind: UDP, Payload: ping, Expect: []byte("PONG")})},
				Target{Key: "closed", Addr: closed, Check: fast(Check{Kind: UDP, Payload: ping})},
				Target{Key: "silent", Addr: silent, Check: fast(Check{Kind: UDP, Payload: ping})},
			)
			rec.expect("echo-any", 1, Healthy)
			rec.expect("echo-expect", 1, Healthy)
			rec.expect("pong", 1, Healthy)
			if u := rec.expect("wrong-reply", 1, Unhealthy); !strings.HasSuffix(u.Reason, `reply of 4 bytes does not contain "PONG"`) {
				t.Errorf("wrong-reply reason %q", u.Reason)
			}
			if u := rec.expect("closed", 1, Unhealthy); !strings.Contains(u.Reason, "port unreachable") || !strings.Contains(u.Reason, "connection refused") {
				t.Errorf("closed reason %q", u.Reason)
			}
			u := rec.expect("silent", 1, Unhealthy)
			if !strings.Contains(u.Reason, "no reply") {
				t.Errorf("silent reason %q", u.Reason)
			}
			if st, _ := c.Status("silent"); !errors.Is(st.LastError, context.DeadlineExceeded) {
				t.Errorf("silent: LastError %v does not match context.DeadlineExceeded", st.LastError)
			}
		})
	}
}
