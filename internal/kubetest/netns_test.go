// SPDX-License-Identifier: Apache-2.0
package kubetest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestNetNS runs the control plane in its own network namespace, bound to a lab address (as
// the lab does): the apiserver's URL and serving certificate name that address, the clients As
// returns connect from inside the namespace, and nothing listens in this process's namespace.
// It needs root (a network namespace).
func TestNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes a network namespace")
	}
	ns := netlab.New(t, netlab.Prefix()+"-cp")
	addr := netip.MustParseAddr("198.18.3.250")
	ns.MustIP(t, "link add d0 type veth peer name d1")
	ns.MustIP(t, "addr add "+addr.String()+"/24 dev d0")
	ns.MustIP(t, "link set d0 up")
	ns.MustIP(t, "link set d1 up")
	cp, err := kubetest.Start(context.Background(), kubetest.Options{Dir: t.TempDir(), NetNS: ns.Name, Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("kube-apiserver ready at %s in namespace %s in %v", cp.URL(), cp.NetNS(), cp.StartupTime())
	if !strings.HasPrefix(cp.URL(), "https://198.18.3.250:") {
		t.Fatalf("URL %s, want the namespace's address", cp.URL())
	}
	if u := whoAmI(t, cp.Controller()); u.Username != kubetest.ControllerUser {
		t.Errorf("controller authenticates as %q", u.Username)
	}
	// The serving certificate names the address: a TLS handshake from inside the namespace
	// verifies against the CA with the address as the server name.
	host := strings.TrimPrefix(cp.URL(), "https://")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.Admin().CAData)
	err = ns.Do(func() error {
		c, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool, ServerName: addr.String()})
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Errorf("TLS to %s with server name %s: %v", host, addr, err)
	}
	// Not reachable from this process's namespace.
	if c, err := net.Dial("tcp", host); err == nil {
		c.Close()
		t.Errorf("the apiserver answers at %s outside its namespace", host)
	}
}
