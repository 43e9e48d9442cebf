// SPDX-License-Identifier: Apache-2.0
package lab

// Scripting a running site: its description as JSON (site.json in its state directory) and a
// control socket (control.sock there) through which the process that owns the site stops,
// kills, starts, restarts, silences (Vanish) and brings back (Return) a gateway's xlb. The
// owner does it, so a daemon restarted that way is its own again: Ctrl-C and `make lab-down`
// remove it with the rest of the site.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names in a site's state directory.
const (
	SiteInfoFile  = "site.json"
	ControlSocket = "control.sock"
)

// SiteInfo describes a running site for scripts (xlb-lab status, site.json).
type SiteInfo struct {
	Prefix     string        `json:"prefix"`
	Dir        string        `json:"dir"`
	OwnerPid   int           `json:"ownerPid"`
	Control    string        `json:"controlSocket"`
	Routing    string        `json:"routing"`
	Mode       string        `json:"mode"`
	Forwarding string        `json:"forwarding"`
	Router     HostInfo      `json:"router"`
	Clients    []HostInfo    `json:"clients"`
	Gateways   []GatewayInfo `json:"gateways"`
	Nodes      []HostInfo    `json:"nodes"`
	Pods       []PodInfo     `json:"pods"`
	// VIPs are the addresses the clients reach the services at.
	VIPs []string `json:"vips"`
}

// HostInfo is a namespace of the site with its addresses.
type HostInfo struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Addr4     string `json:"addr4,omitempty"`
	Addr6     string `json:"addr6,omitempty"`
}

// GatewayInfo is a gateway and its xlb.
type GatewayInfo struct {
	HostInfo
	Running  bool   `json:"running"`
	Pid      int    `json:"pid,omitempty"`
	Vanished bool   `json:"vanished,omitempty"`
	Listen   string `json:"listen"`
	Config   string `json:"config"`
	Log      string `json:"log"`
}

// PodInfo is a pod and its node.
type PodInfo struct {
	HostInfo
	Node string `json:"node"`
}

// Info describes s now.
func (s *Site) Info() SiteInfo {
	in := SiteInfo{Prefix: s.Prefix, Dir: s.Dir, OwnerPid: os.Getpid(), Control: filepath.Join(s.Dir, ControlSocket),
		Routing: s.Opts.Routing.String(), Mode: s.Opts.Mode.String(), Forwarding: "dsr",
		Router: HostInfo{Name: "router", Namespace: s.Router.NS.Name}}
	if s.Opts.ReturnPath {
		in.Forwarding = "returnPath"
	}
	for _, c := range s.Clients {
		in.Clients = append(in.Clients, HostInfo{c.Name, c.NS.Name, c.Addr4.String(), c.Addr6.String()})
	}
	for _, g := range s.Gateways {
		in.Gateways = append(in.Gateways, GatewayInfo{HostInfo: HostInfo{g.Name, g.NS.Name, g.Upstream4.String(), g.Upstream6.String()},
			Running: g.Running(), Pid: g.Pid(), Vanished: g.isVanished(), Listen: g.Listen, Config: g.ConfigPath, Log: g.LogPath})
	}
	for _, n := range s.Nodes {
		in.Nodes = append(in.Nodes, HostInfo{n.Name, n.NS.Name, n.Addr4.String(), n.Addr6.String()})
	}
	s.mu.Lock()
	pods := append([]*Pod(nil), s.Pods...)
	s.mu.Unlock()
	for _, p := range pods {
		in.Pods = append(in.Pods, PodInfo{HostInfo{p.Name, p.NS.Name, p.Addr4.String(), p.Addr6.String()}, p.Node.Name})
	}
	in.VIPs = []string{VIP4.String(), VIP6.String()}
	if s.Opts.Mode == Kubernetes {
		in.VIPs = []string{ExampleDualVIP4.String(), ExampleDualVIP6.String()}
	}
	return in
}

// WriteInfo writes s's description to site.json in its state directory.
func (s *Site) WriteInfo() error {
	b, err := json.MarshalIndent(s.Info(), "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, SiteInfoFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("lab: write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// ControlRequest is one request on the control socket: Op "status", or "gateway" with
// Gateway (a name, "g1") and Action: stop (SIGTERM), kill (SIGKILL), start, restart (kill and
// start), vanish (a hard failure: Gateway.Vanish) or return (Gateway.Return).
type ControlRequest struct {
	Op      string `json:"op"`
	Gateway string `json:"gateway,omitempty"`
	Action  string `json:"action,omitempty"`
}

// ControlReply answers a ControlRequest: the site after it, or what went wrong.
type ControlReply struct {
	Error string    `json:"error,omitempty"`
	Site  *SiteInfo `json:"site,omitempty"`
}

// ServeControl serves the control socket until ctx ends, keeping site.json current after each
// action. One request per connection, a JSON line each way.
func (s *Site) ServeControl(ctx context.Context) error {
	path := filepath.Join(s.Dir, ControlSocket)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("lab: control socket: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var mu sync.Mutex // one action at a time
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("lab: control socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
			var req ControlRequest
			line, err := bufio.NewReader(conn).ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(line, &req)
			}
			var rep ControlReply
			if err != nil {
				rep.Error = "bad request: " + err.Error()
			} else {
				mu.Lock()
				err = s.control(req)
				mu.Unlock()
				if err != nil {
					rep.Error = err.Error()
				}
				in := s.Info()
				rep.Site = &in
				if werr := s.WriteInfo(); werr != nil && rep.Error == "" {
					rep.Error = werr.Error()
				}
			}
			b, _ := json.Marshal(rep)
			_, _ = conn.Write(append(b, '\n'))
		}()
	}
}

// control performs req.
func (s *Site) control(req ControlRequest) error {
	switch req.Op {
	case "status":
		return nil
	case "gateway":
	default:
		return fmt.Errorf("unknown op %q (want status or gateway)", req.Op)
	}
	var g *Gateway
	for _, x := range s.Gateways {
		if x.Name == req.Gateway {
			g = x
		}
	}
	if g == nil {
		return fmt.Errorf("no gateway %q (the site has %v)", req.Gateway, gatewayNames(s.Gateways))
	}
	switch req.Action {
	case "stop":
		return g.Stop()
	case "kill":
		return g.Kill()
	case "start":
		return g.Start()
	case "restart":
		return g.Restart()
	case "vanish":
		return g.Vanish()
	case "return":
		return g.Return()
	}
	return fmt.Errorf("unknown action %q (want stop, kill, start, restart, vanish or return)", req.Action)
}

// Control sends req to the control socket at path and returns the reply (an error in the reply
// is returned as an error, with the reply).
func Control(path string, req ControlRequest) (ControlReply, error) {
	var rep ControlReply
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return rep, fmt.Errorf("lab: control socket %s: %w (is the site's xlb-lab process running?)", path, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return rep, err
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("lab: control socket %s: %w", path, err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, err
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// RunningSites returns the state directories of the sites under stateDir whose owner runs and
// that have a control socket, sorted by name.
func RunningSites(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range entries {
		dir := filepath.Join(stateDir, e.Name())
		if !e.IsDir() || !prefixRE.MatchString(e.Name()) || !ownerAlive(dir) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, ControlSocket)); err == nil {
			out = append(out, dir)
		}
	}
	return out, nil
}
