// SPDX-License-Identifier: Apache-2.0
package health

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests probe real servers on loopback only: 127.0.0.1 and [::1].

// waitLimit bounds every wait of these tests for something that should happen much sooner.
const waitLimit = 10 * time.Second

// recorder collects the updates a Checker delivers and checks that OnChange is never called
// concurrently with itself.
type recorder struct {
	t       testing.TB
	running atomic.Int32
	mu      sync.Mutex
	updates []stamped
	changed chan struct{} // signalled after each update
}

// stamped is an update and when it arrived.
type stamped struct {
	Update
	at time.Time
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, changed: make(chan struct{}, 1)}
}

// onChange is the Checker's OnChange.
func (r *recorder) onChange(u Update) {
	if n := r.running.Add(1); n != 1 {
		r.t.Errorf("OnChange called concurrently (%d calls running)", n)
	}
	defer r.running.Add(-1)
	r.mu.Lock()
	r.updates = append(r.updates, stamped{u, time.Now()})
	r.mu.Unlock()
	signal(r.changed)
}

// all returns the updates so far.
func (r *recorder) all() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]stamped(nil), r.updates...)
}

// of returns the updates for key so far.
func (r *recorder) of(key string) []stamped {
	var out []stamped
	for _, u := range r.all() {
		if u.Key == key {
			out = append(out, u)
		}
	}
	return out
}

// wait waits until key's n-th update (counting from 1) arrived and returns it, failing the
// test if it has not within waitLimit.
func (r *recorder) wait(key string, n int) stamped {
	r.t.Helper()
	deadline := time.After(waitLimit)
	for {
		if us := r.of(key); len(us) >= n {
			return us[n-1]
		}
		select {
		case <-r.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			r.t.Fatalf("%q: no update #%d within %v; got %+v", key, n, waitLimit, r.of(key))
		}
	}
}

// expect waits for key's n-th update and checks its Health.
func (r *recorder) expect(key string, n int, h Health) stamped {
	r.t.Helper()
	u := r.wait(key, n)
	if u.Health != h {
		r.t.Fatalf("%q update #%d: %v (%s), expected %v", key, n, u.Health, u.Reason, h)
	}
	return u
}

// testLogger logs to the test's output, shown when it fails or with -v.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start makes a Checker with opts (its OnChange and Logger set by the test) and runs it until
// the test ends; the cleanup checks that Run returns.
func start(t *testing.T, opts Options) (*Checker, *recorder) {
	t.Helper()
	rec := newRecorder(t)
	opts.OnChange = rec.onChange
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	c := New(opts)
	runUntilCleanup(t, c)
	return c, rec
}

// runUntilCleanup runs c until the test ends and checks that Run then returns nil in time.
func runUntilCleanup(t *testing.T, c *Checker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Run did not return within %v of its context's end", waitLimit)
		}
	})
}

// mustSet calls c.Set and fails the test on an error.
func mustSet(t *testing.T, c *Checker, targets ...Target) {
	t.Helper()
	if err := c.Set(targets); err != nil {
		t.Fatalf("Set: %v", err)
	}
}

// tcpServer is a loopback TCP listener that accepts connections and closes them at once,
// counting them.
type tcpServer struct {
	ln       net.Listener
	accepted atomic.Int64
	done     chan struct{}
}

// listenTCP starts a tcpServer on network ("tcp4" on 127.0.0.1, "tcp6" on [::1]), closed when
// the test ends.
func listenTCP(t testing.TB, network string) *tcpServer {
	t.Helper()
	ln, err := net.Listen(network, loopback(t, network)+":0")
	if err != nil {
		t.Fatalf("listen %s: %v", network, err)
	}
	s := &tcpServer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(s.close)
	return s
}

// close stops the listener and waits for its accept loop to end.
func (s *tcpServer) close() {
	_ = s.ln.Close()
	<-s.done
}

// addr returns the listener's address.
func (s *tcpServer) addr() netip.AddrPort { return addrPort(s.ln.Addr()) }

// loopback returns the loopback address of network's family, skipping the test when the
// machine has no IPv6 loopback.
func loopback(t testing.TB, network string) string {
	t.Helper()
	if network[len(network)-1] != '6' {
		return "127.0.0.1"
	}
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	_ = ln.Close()
	return "[::1]"
}

// addrPort converts a TCP or UDP net.Addr to a netip.AddrPort.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case *net.UDPAddr:
		return a.AddrPort()
	}
	return netip.MustParseAddrPort(a.String())
}

// fast is a check timing for tests: probes every 50 ms, with as long a timeout, which a
// loopback probe meets even on a loaded machine under the race detector.
func fast(c Check) Check {
	c.Interval = 50 * time.Millisecond
	c.Timeout = 50 * time.Millisecond
	return c
}

// fastTLS gives HTTPS checks room for a slow handshake: on a loaded 2-core machine (CI runs
// other packages' tests meanwhile) one has taken more than 500 ms, and the verdicts these tests
// expect (a certificate error, say) must not turn into timeouts. Only the first probe matters.
func fastTLS(c Check) Check {
	c.Interval = 3 * time.Second
	c.Timeout = 3 * time.Second
	return c
}
