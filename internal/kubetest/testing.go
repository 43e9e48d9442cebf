// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"context"
	"testing"
	"time"
)

// StartT starts a control plane for t and stops it when t ends (t.Cleanup), showing the end of
// the logs if t failed. It fails t, never skips it, when no control plane can be had.
func StartT(t testing.TB) *ControlPlane {
	t.Helper()
	cp, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start kube-apiserver %s: %v", KubeVersion, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.logTails(40))
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	t.Logf("kube-apiserver %s + etcd %s ready at %s in %v", KubeVersion, EtcdVersion, cp.URL(), cp.StartupTime().Round(time.Millisecond))
	return cp
}
