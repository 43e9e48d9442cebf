package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
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
