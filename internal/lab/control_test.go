// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestControl drives a site through its control socket, as `xlb-lab status` and `xlb-lab
// gateway` do: the description names every part with its pid; restart, kill and start act on a
// gateway's xlb; a bad request is refused with a reason; and the site's Close removes a daemon
// started through the socket, as Ctrl-C would.
func TestControl(t *testing.T) {
	s := NewT(t, Options{XLB: xlbBin, Routing: Static, Pods: 2})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.ServeControl(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeControl: %v", err)
		}
	})
	if err := s.WriteInfo(); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(s.Dir, ControlSocket)
	var rep ControlReply
	var err error
	for range 50 { // the socket is listening once ServeControl has started
		if rep, err = Control(sock, ControlRequest{Op: "status"}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	in := rep.Site
	if len(in.Gateways) != 2 || !in.Gateways[0].Running || in.Gateways[0].Pid == 0 || in.Router.Namespace == "" ||
		len(in.Pods) != 2 || in.OwnerPid != os.Getpid() || len(in.VIPs) != 2 {
		t.Fatalf("status: %+v", in)
	}
	dirs, err := RunningSites(s.Opts.StateDir)
	if err != nil || !slices.Contains(dirs, s.Dir) {
		t.Errorf("RunningSites: %v %v, want %s among them", dirs, err, s.Dir)
	}
	if b, err := os.ReadFile(filepath.Join(s.Dir, SiteInfoFile)); err != nil || !strings.Contains(string(b), `"ownerPid"`) {
		t.Errorf("site.json: %v %s", err, b)
	}

	gw := func(action string) GatewayInfo {
		t.Helper()
		rep, err := Control(sock, ControlRequest{Op: "gateway", Gateway: "g1", Action: action})
		if err != nil {
			t.Fatalf("g1 %s: %v", action, err)
		}
		return rep.Site.Gateways[0]
	}
	before := in.Gateways[0].Pid
	restarted := gw("restart")
	if !restarted.Running || restarted.Pid == 0 || restarted.Pid == before {
		t.Errorf("g1 restart: %+v (pid before %d)", restarted, before)
	}
	if g := gw("kill"); g.Running {
		t.Errorf("g1 kill: %+v", g)
	}
	started := gw("start")
	if !started.Running {
		t.Errorf("g1 start: %+v", started)
	}
	for _, bad := range []ControlRequest{{Op: "gateway", Gateway: "g9", Action: "kill"}, {Op: "gateway", Gateway: "g1", Action: "explode"}, {Op: "reboot"}} {
		if _, err := Control(sock, bad); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}

	// The site's process owns what it started: Close removes it.
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeControl: %v", err)
	}
	served <- nil
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(started.Pid))); err == nil {
		t.Errorf("xlb %d, started through the control socket, survived the site's Close", started.Pid)
	}
}
