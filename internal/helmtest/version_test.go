// SPDX-License-Identifier: Apache-2.0
package helmtest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlb-dev/xlb/internal/helmtest"
)

// TestHelmVersion: the helm the tests run is the one pinned in three places that must agree
// (helmbin/build.sh, helmbin/go.mod, HelmVersion), built from its module with its version
// linked in.
func TestHelmVersion(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "internal", "helmtest", "helmbin")
	script, err := os.ReadFile(filepath.Join(dir, "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "\nHELM_VERSION="+helmtest.HelmVersion+"\n") {
		t.Errorf("helmbin/build.sh does not build helm %s", helmtest.HelmVersion)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "\nrequire helm.sh/helm/v4 "+helmtest.HelmVersion+"\n") {
		t.Errorf("helmbin/go.mod does not require helm.sh/helm/v4 %s", helmtest.HelmVersion)
	}
	out, err := findHelm(t).Run(t.Context(), "version", "--short")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, helmtest.HelmVersion) {
		t.Errorf("helm version --short: %q, want %s", got, helmtest.HelmVersion)
	}
}
