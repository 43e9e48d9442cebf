// SPDX-License-Identifier: Apache-2.0
package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The agent's tests run on fakeSocketLB, an in-memory datapath.SocketLB: no kernel, no root.
// xdp/socklb's tests hold the real one to the contract, and cmd/xlb's TestAgentE2E runs the
// whole agent on it.

// fakeSocketLB is a datapath.SocketLB in memory. Its methods are safe for concurrent use: the
// agent's goroutine writes while the test reads.
type fakeSocketLB struct {
	mu   sync.Mutex
	held map[datapath.Frontend]datapath.ConnectFrontend
	// sets, deletes and commits count the writes.
	sets, deletes, commits int
	// fail: frontends whose Set fails.
	fail map[datapath.Frontend]bool
	// counters and countersErr are what Counters returns.
	counters    datapath.SocketCounters
	countersErr error
	// closed and closeErr are what CloseLostUDP returns; closeCalls the netnsDir of each call.
	closed     []datapath.ClosedSocket
	closeErr   error
	closeCalls []string
	// closedDP and removed say whether Close and Remove were called.
	closedDP, removed bool
}

var _ datapath.SocketLB = (*fakeSocketLB)(nil)

var errRefused = errors.New("fake datapath: write refused")

func newFakeSocketLB() *fakeSocketLB {
	return &fakeSocketLB{held: map[datapath.Frontend]datapath.ConnectFrontend{}, fail: map[datapath.Frontend]bool{}}
}

func (f *fakeSocketLB) ConnectFrontends() (map[datapath.Frontend]datapath.ConnectFrontend, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.held), nil
}

func (f *fakeSocketLB) SetConnectFrontend(fr datapath.Frontend, cf datapath.ConnectFrontend) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[fr] {
		return errRefused
	}
	f.sets++
	f.held[fr] = datapath.ConnectFrontend{Endpoints: slices.Clone(cf.Endpoints), AffinityTimeout: cf.AffinityTimeout}
	return nil
}

func (f *fakeSocketLB) DeleteConnectFrontend(fr datapath.Frontend) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	delete(f.held, fr)
	return nil
}

func (f *fakeSocketLB) Commit(bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits++
	return nil
}

func (f *fakeSocketLB) Counters() (datapath.SocketCounters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters, f.countersErr
}

func (f *fakeSocketLB) CloseLostUDP(netnsDir string) ([]datapath.ClosedSocket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeCalls = append(f.closeCalls, netnsDir)
	return f.closed, f.closeErr
}

func (f *fakeSocketLB) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closedDP = true
	return nil
}

func (f *fakeSocketLB) Remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
	return nil
}

// with runs fn with f locked.
func (f *fakeSocketLB) with(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// logs is a log the test reads, safe for concurrent use.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything logged.
func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count returns how many lines contain s.
func (l *logs) count(s string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// newLogs returns a logger (debug and up) writing to a logs, shown if t fails.
func newLogs(t *testing.T) (*slog.Logger, *logs) {
	l := &logs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", l.String())
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

// fakeDSR is a datapath.DSRDatapath in memory, safe for concurrent use.
type fakeDSR struct {
	mu    sync.Mutex
	pairs map[datapath.DSRService]bool
	ifs   map[string]datapath.DSRDirection
	// ops: the attach and detach calls that changed something, in order: "attach n0 both".
	ops []string
	// failAttach: interfaces whose Attach fails; failPair: pairs whose Add fails.
	failAttach map[string]bool
	failPair   map[datapath.DSRService]bool
	counters   map[string]uint64
	// closed and removed say whether Close and Remove were called.
	closed, removed bool
}

var _ datapath.DSRDatapath = (*fakeDSR)(nil)

func newFakeDSR() *fakeDSR {
	return &fakeDSR{pairs: map[datapath.DSRService]bool{}, ifs: map[string]datapath.DSRDirection{},
		failAttach: map[string]bool{}, failPair: map[datapath.DSRService]bool{}, counters: map[string]uint64{}}
}

func (f *fakeDSR) DSRServices() (map[datapath.DSRService]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.pairs), nil
}

func (f *fakeDSR) AddDSRService(s datapath.DSRService) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPair[s] {
		return errRefused
	}
	f.pairs[s] = true
	return nil
}

func (f *fakeDSR) DeleteDSRService(s datapath.DSRService) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pairs, s)
	return nil
}

func (f *fakeDSR) Attach(ifname string, dir datapath.DSRDirection) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAttach[ifname] {
		return errors.New("fake: attach to " + ifname + ": no such network interface")
	}
	if add := dir &^ f.ifs[ifname]; add != 0 {
		f.ops = append(f.ops, "attach "+ifname+" "+add.String())
		f.ifs[ifname] |= dir
	}
	return nil
}

func (f *fakeDSR) Detach(ifname string, dir datapath.DSRDirection) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rm := dir & f.ifs[ifname]; rm != 0 {
		f.ops = append(f.ops, "detach "+ifname+" "+rm.String())
		if f.ifs[ifname] &^= dir; f.ifs[ifname] == 0 {
			delete(f.ifs, ifname)
		}
	}
	return nil
}

func (f *fakeDSR) Interfaces() map[string]datapath.DSRDirection {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.ifs)
}

func (f *fakeDSR) Counters() (map[string]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.counters), nil
}

func (f *fakeDSR) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeDSR) Remove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
	clear(f.ifs)
	return nil
}

// takeOps returns the attach and detach calls since the last takeOps.
func (f *fakeDSR) takeOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// held returns the pairs held, as "frontend -> endpoint" strings, sorted.
func (f *fakeDSR) held() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p := range f.pairs {
		out = append(out, p.Frontend.String()+" -> "+p.Endpoint.String())
	}
	slices.Sort(out)
	return out
}

// fakeRoutes is a Routes from a table: a target prefix → the interfaces toward it. It records
// the targets it was last asked about.
type fakeRoutes struct {
	mu    sync.Mutex
	table map[netip.Prefix][]string
	err   error
	asked []netip.Prefix
}

func (r *fakeRoutes) Interfaces(targets []netip.Prefix) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = slices.Clone(targets)
	if r.err != nil {
		return nil, r.err
	}
	var out []string
	for _, t := range targets {
		out = append(out, r.table[t]...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (r *fakeRoutes) set(t string, ifs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.table[netip.MustParsePrefix(t)] = ifs
}

func (r *fakeRoutes) lastAsked() []netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}
