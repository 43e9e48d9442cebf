// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"fmt"
	"os"
	"testing"
)

// xlbBin is the xlb binary the tests' gateways run: $XLB_BIN, or built once by TestMain.
var xlbBin string

// envChild, set, makes the test binary a lab process that builds a site and waits to be killed
// (TestDown).
const envChild = "XLB_LAB_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Ctrl-C or SIGTERM: remove the sites before exiting.
	stop := CloseAllOnSignal()
	defer stop()
	xlbBin = os.Getenv("XLB_BIN")
	if xlbBin == "" && os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "xlb-lab-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if xlbBin, err = Build(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// childMain builds a one-gateway site, says "PREFIX <prefix>" and waits until stdin closes or
// it is killed; it never removes the site itself.
func childMain() int {
	s, err := New(Options{XLB: os.Getenv("XLB_BIN"), Gateways: 1, Nodes: 1, Pods: 1, ReturnPath: EnvReturnPath()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("PREFIX %s\n", s.Prefix)
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			return 0
		}
	}
}
