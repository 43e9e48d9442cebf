package lab

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
)

// kubeSite builds the one Kubernetes-mode site the Kubernetes tests share (BIRD routing when
// bird is installed, as make lab runs it).
func kubeSite(t *testing.T) *Site {
	t.Helper()
	routing := Static
	if _, err := exec.LookPath("bird"); err == nil {
		routing = BIRD
	}
	var log bytes.Buffer
	s, err := New(Options{XLB: xlbBin, Mode: Kubernetes, Routing: routing, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, g := range s.Gateways {
				t.Logf("%s xlb log (%s):\n%s", g.Name, g.LogPath, g.logTail(60))
			}
			t.Logf("site log:\n%s", log.String())
		}
		if err := s.Close(); err != nil {
			t.Errorf("close site %s: %v", s.Prefix, err)
		}
	})
	return s
}

// TestKubernetes runs the Kubernetes-mode properties on one site (etcd and kube-apiserver in the
// control namespace, both gateways' xlb as controllers, BIRD peering with them).
func TestKubernetes(t *testing.T) {
	s := kubeSite(t)
	t.Run("Demo", func(t *testing.T) {
		var b bytes.Buffer
		s.Describe(&b)
		err := s.Demo(context.Background(), &b)
		s.Guide(&b)
		if err != nil || testing.Verbose() {
			t.Logf("demo output:\n%s", b.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}
