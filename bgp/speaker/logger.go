// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// logAdapter sends GoBGP's log lines to slog (GoBGP's Debug stays Debug) and remembers, per
// peer, the last thing that went wrong, for PeerStatus.LastError.
type logAdapter struct {
	log *slog.Logger

	mu sync.Mutex
	// lastErr maps a peer address → the last error GoBGP logged about it.
	lastErr map[netip.Addr]string
	// bfd maps a peer address → its BFD session's transitions, as GoBGP logs them; bfdDown
	// → when BFD last took its session down.
	bfd     map[netip.Addr]bfdTrack
	bfdDown map[netip.Addr]time.Time
	// readd gets a peer to re-add (see Speaker.readdPeers): its BFD session went down (GoBGP
	// has reset its BGP session by then), or its session went down after being up a while.
	readd chan readd
	// establishedAt maps a peer → when its session last became established.
	establishedAt map[netip.Addr]time.Time
}

// readd is a peer to re-add, why, and when the event that asks for it was logged.
type readd struct {
	addr netip.Addr
	why  string
	at   time.Time
}

// steadyUptime is how long a session must have been up for its going down to re-add the peer
// at once (a fresh session: it reconnects within connectRetry); a session that drops sooner
// waits GoBGP's idle hold (5 s), which keeps a peer that refuses us from a tight loop.
const steadyUptime = 10 * time.Second

// bfdTrack is what the speaker saw of a peer's BFD session: its last state (down, init, up)
// and the transitions into and out of up.
type bfdTrack struct {
	state       string
	transitions uint64
	since       time.Time
	suspended   bool // flap dampening: BFD off for now (Speaker.noteBFDDown)
}

// resetBFD records that peer addr's BFD session starts afresh (the peer re-added, or BFD turned
// on): down until GoBGP says otherwise. Its transitions are kept.
func (a *logAdapter) resetBFD(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.bfd[addr]
	if t.state != "down" {
		t.state, t.since = "down", time.Now()
	}
	a.bfd[addr] = t
}

// setSuspended marks peer addr's BFD suspended (or not).
func (a *logAdapter) setSuspended(addr netip.Addr, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.bfd[addr]
	t.suspended = on
	if on {
		t.state, t.since = "down", time.Now()
	}
	a.bfd[addr] = t
}

func newLogAdapter(l *slog.Logger) *logAdapter {
	return &logAdapter{log: l, lastErr: make(map[netip.Addr]string), bfd: make(map[netip.Addr]bfdTrack),
		bfdDown: make(map[netip.Addr]time.Time), readd: make(chan readd, 64), establishedAt: make(map[netip.Addr]time.Time)}
}

// bfdState returns what was seen of peer addr's BFD session.
func (a *logAdapter) bfdState(addr netip.Addr) bfdTrack {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bfd[addr]
}

// noteBFD records a BFD state change GoBGP logged ("Set state to UP", at Debug) and logs it at
// Info (Warn when the session leaves up: the BGP session is reset with it).
func (a *logAdapter) noteBFD(msg string, fields map[string]any) {
	state, ok := strings.CutPrefix(msg, "Set state to ")
	if !ok || fields["Topic"] != "bfd" {
		return
	}
	addr, ok := peerOf(fields, "Peer")
	if !ok {
		return
	}
	state = strings.ToLower(state)
	a.mu.Lock()
	t := a.bfd[addr]
	was := t.state
	if was == state {
		a.mu.Unlock()
		return
	}
	if was == "up" || state == "up" {
		t.transitions++
	}
	t.state, t.since = state, time.Now()
	a.bfd[addr] = t
	a.mu.Unlock()
	if state == "down" && (was == "up" || was == "init") {
		a.askReadd(readd{addr: addr, why: "bfd down", at: time.Now()})
	}
	level := slog.LevelInfo
	if was == "up" {
		level = slog.LevelWarn
	}
	if was == "" {
		was = "none"
	}
	a.log.Log(context.Background(), level, "bfd session state changed", "peer", addr, "state", state, "was", was)
}

// logger is the logger GoBGP is given, with the level it logs at (Debug: GoBGP logs failed
// connection attempts at Debug only, and lastErr needs them; slog filters what is printed).
func (a *logAdapter) logger() (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	return slog.New(&gobgpHandler{a: a}), lv
}

func (a *logAdapter) lastError(addr netip.Addr) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr[addr]
}

func (a *logAdapter) forget(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.lastErr, addr)
	delete(a.bfd, addr)
	delete(a.bfdDown, addr)
	delete(a.establishedAt, addr)
}

// note records a peer's error: a failed connection attempt, a session that went down (named a
// BFD failure when BFD took it down), or any warning or error about the peer. fields are the
// line's attributes, resolved.
func (a *logAdapter) note(level slog.Level, msg string, fields map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fields["Topic"] == "bfd" {
		addr, ok := peerOf(fields, "Peer")
		if !ok || (msg != "Expired" && msg != "Remote peer signaled BFD down") {
			return
		}
		why := "no BFD packet within the detection time"
		if msg != "Expired" {
			why = "the peer signalled down"
		}
		a.lastErr[addr] = "bfd down (" + why + "): session reset"
		a.bfdDown[addr] = time.Now()
		return
	}
	addr, ok := peerOf(fields, "Key")
	if !ok {
		return
	}
	var text string
	switch {
	case msg == "failed to connect":
		text = fmt.Sprintf("connect: %v", fields["Error"])
	case msg == "state changed" && fields["old"] == "BGP_FSM_ESTABLISHED":
		if time.Since(a.bfdDown[addr]) < bfdResetWindow {
			return // BFD's reset: its own error says why
		}
		text = fmt.Sprintf("session down: %v", fields["reason"])
	case level >= slog.LevelWarn:
		text = msg
		for _, k := range []string{"Error", "Err", "Data", "Reason"} {
			if v, ok := fields[k]; ok {
				text = fmt.Sprintf("%s: %v", msg, v)
				break
			}
		}
	default:
		return
	}
	a.lastErr[addr] = text
}

// askReadd queues r for Speaker.readdPeers (dropped when the queue is full: a flood of events
// needs no more than the re-adds already queued).
func (a *logAdapter) askReadd(r readd) {
	select {
	case a.readd <- r:
	default:
	}
}

// noteSession follows a peer's session: when it became established, and, when it goes down
// after steadyUptime, a re-add (GoBGP would wait its 5 s idle hold before reconnecting).
func (a *logAdapter) noteSession(msg string, fields map[string]any) {
	if msg != "state changed" {
		return
	}
	addr, ok := peerOf(fields, "Key")
	if !ok {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case fields["new"] == "BGP_FSM_ESTABLISHED":
		a.establishedAt[addr] = now
		select { // BFD starts now (Speaker.readdPeers: "arm")
		case a.readd <- readd{addr: addr, why: "arm", at: now}:
		default:
		}
	case fields["old"] == "BGP_FSM_ESTABLISHED":
		if up, ok := a.establishedAt[addr]; ok && now.Sub(up) >= steadyUptime {
			select {
			case a.readd <- readd{addr: addr, why: fmt.Sprintf("session down after %v up", now.Sub(up).Round(time.Second)), at: now}:
			default:
			}
		}
		delete(a.establishedAt, addr)
	}
}

// peerOf reads the peer address a GoBGP log line names in attribute key (Key for the BGP
// session's lines, Peer for BFD's).
func peerOf(fields map[string]any, key string) (netip.Addr, bool) {
	v, _ := fields[key].(string)
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// bfdResetWindow is how long after BFD went down a session's going down is BFD's doing.
const bfdResetWindow = 5 * time.Second

// gobgpHandler is the slog.Handler GoBGP logs through. Every line about a peer goes through
// logAdapter.note; the lines the speaker's logger prints at their level are passed on to it,
// "gobgp: " before the message, GoBGP's Topic attribute dropped and its Key (the peer) named
// peer. Groups are flattened: GoBGP uses none.
type gobgpHandler struct {
	a     *logAdapter
	attrs []slog.Attr
}

// Enabled implements slog.Handler: every level, for note.
func (h *gobgpHandler) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs implements slog.Handler.
func (h *gobgpHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &gobgpHandler{a: h.a, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup implements slog.Handler.
func (h *gobgpHandler) WithGroup(string) slog.Handler { return h }

// Handle implements slog.Handler.
func (h *gobgpHandler) Handle(ctx context.Context, r slog.Record) error {
	all := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs())
	all = append(all, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		all = append(all, a)
		return true
	})
	fields := make(map[string]any, len(all))
	for _, a := range all {
		fields[a.Key] = a.Value.Resolve().Any()
	}
	h.a.note(r.Level, r.Message, fields)
	h.a.noteBFD(r.Message, fields)
	h.a.noteSession(r.Message, fields)
	if !h.a.log.Enabled(ctx, r.Level) {
		return nil
	}
	out := make([]slog.Attr, 0, len(all))
	for _, a := range all {
		switch a.Key {
		case "Topic":
			continue
		case "Key":
			a.Key = "peer"
		}
		out = append(out, a)
	}
	h.a.log.LogAttrs(ctx, r.Level, "gobgp: "+r.Message, out...)
	return nil
}
