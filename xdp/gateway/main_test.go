// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"os"
	"testing"
)

// TestMain lets the test binary double as a loader process: TestE2ELoaderRestart re-executes it
// with e2eEnvLoader set, and the child then runs runE2ELoader (load, configure, attach, block)
// instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(e2eEnvLoader) == "1" {
		os.Exit(runE2ELoader())
	}
	os.Exit(m.Run())
}
