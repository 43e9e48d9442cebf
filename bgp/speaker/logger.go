package speaker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// logAdapter sends GoBGP's log lines to slog (GoBGP's Debug stays Debug) and remembers, per
// peer, the last thing that went wrong, for PeerStatus.LastError.
type logAdapter struct {
	log *slog.Logger

	mu sync.Mutex
	// lastErr maps a peer address → the last error GoBGP logged about it.
	lastErr map[netip.Addr]string
}

var _ gobgplog.Logger = (*logAdapter)(nil)

func newLogAdapter(l *slog.Logger) *logAdapter {
	return &logAdapter{log: l, lastErr: make(map[netip.Addr]string)}
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
}

func (a *logAdapter) emit(level slog.Level, msg string, fields gobgplog.Fields) {
	a.note(level, msg, fields)
	if !a.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields))
	for k, v := range fields {
		if k == "Topic" {
			continue
		}
		if k == "Key" {
			k = "peer"
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	a.log.LogAttrs(context.Background(), level, "gobgp: "+msg, attrs...)
}

// note records a peer's error: a failed connection attempt, a session that went down, or any
// warning or error about the peer.
func (a *logAdapter) note(level slog.Level, msg string, fields gobgplog.Fields) {
	key, _ := fields["Key"].(string)
	addr, err := netip.ParseAddr(key)
	if err != nil {
		return
	}
	var text string
	switch {
	case msg == "failed to connect":
		text = fmt.Sprintf("connect: %v", fields["Error"])
	case msg == "state changed" && fields["old"] == "BGP_FSM_ESTABLISHED":
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
	a.mu.Lock()
	a.lastErr[addr.Unmap()] = text
	a.mu.Unlock()
}

func (a *logAdapter) Panic(msg string, f gobgplog.Fields) {
	a.emit(slog.LevelError, msg, f)
	panic(msg)
}

func (a *logAdapter) Fatal(msg string, f gobgplog.Fields) {
	// GoBGP calls Fatal for unrecoverable internal errors; it expects the process to end.
	a.emit(slog.LevelError+4, msg, f)
	panic("gobgp fatal: " + msg)
}

func (a *logAdapter) Error(msg string, f gobgplog.Fields) { a.emit(slog.LevelError, msg, f) }
func (a *logAdapter) Warn(msg string, f gobgplog.Fields)  { a.emit(slog.LevelWarn, msg, f) }
func (a *logAdapter) Info(msg string, f gobgplog.Fields)  { a.emit(slog.LevelInfo, msg, f) }
func (a *logAdapter) Debug(msg string, f gobgplog.Fields) { a.emit(slog.LevelDebug, msg, f) }

// SetLevel is ignored: slog's handler decides what is printed.
func (a *logAdapter) SetLevel(gobgplog.LogLevel) {}

// GetLevel is Debug so that GoBGP always reports what lastErr needs (failed connections are
// logged at Debug only); slog filters what is printed.
func (a *logAdapter) GetLevel() gobgplog.LogLevel { return gobgplog.DebugLevel }
