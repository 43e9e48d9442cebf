// SPDX-License-Identifier: Apache-2.0
package srccheck

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A time "d ago" computed from the boot-relative clock (CLOCK_MONOTONIC, bpf_ktime_get*_ns) is
// before the clock's zero on a host booted less than d ago — a CI machine or a test guest, booted
// minutes or seconds before the tests — and wraps into the far future, where the datapath counts
// an entry live rather than idle. Tests that pass on a long-lived workstation then fail on CI, or
// worse, pass there for the wrong reason. These patterns catch the ways it was written before.
var clockSubtractions = []*regexp.Regexp{
	// monotonicNow() - x, coarseNow() - x: a reading moved back by a duration.
	regexp.MustCompile(`\b(monotonicNow|coarseNow|ktimeNow|bootNow)\(\)\s*-[^-=]`),
	// e.SeenNs -= x, LastSeen -= x, ...: a stamp moved back in place.
	regexp.MustCompile(`\b(SeenNs|LastSeen|LastNs|StartNs|Ns)\s*-=`),
	// now - uint64(time.Hour): a 64-bit reading minus a duration.
	regexp.MustCompile(`\bnow\s*-\s*uint64\(`),
}

// clockOK marks a line that subtracts on purpose, with its reason (e.g. 32-bit slot units that
// wrap exactly as the datapath's do, or a guard that waited for the clock first).
const clockOK = "clock-ok:"

// TestNoClockSubtractionInTests: no test moves a boot-relative reading back by a duration
// without saying why that is safe (clockOK). Use a real earlier reading, a helper that waits
// until the clock is far enough from zero (awaitClock in xdp/gateway, age in xdp/dsr), or wrapped
// 32-bit units compared as the datapath compares them.
func TestNoClockSubtractionInTests(t *testing.T) {
	root := moduleRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); name == ".git" || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join(root, "internal", "srccheck")) {
			return nil
		}
		checked++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.Contains(line, clockOK) || strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			for _, re := range clockSubtractions {
				if re.MatchString(line) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: a boot-relative time moved back by a duration (wraps below zero on a freshly booted host; see %s's doc): %s",
						rel, n, "TestNoClockSubtractionInTests", strings.TrimSpace(line))
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	if checked < 50 {
		t.Fatalf("checked %d test files under %s: the walk found too few to be the repository", checked, root)
	}
}

// TestClockPatterns: the patterns catch what they are for and leave alone what is right.
func TestClockPatterns(t *testing.T) {
	bad := []string{
		"stale := monotonicNow() - uint64(time.Hour)",
		"v.SeenNs -= uint64(idle)",
		"e.LastSeen -= uint64(2 * time.Hour)",
		"if now - uint64(time.Minute) > e.LastSeen {",
	}
	good := []string{
		"stale := monotonicNow()",
		"if age := slotAge(e.SynTime, monotonicNow()); age > time.Second {",
		"lag := time.Duration(sent - stale)",
		"for i := n - 1; i >= 0; i-- {",
		"monotonicNow() -= 1 // " + clockOK + " never: only here to prove the marker",
	}
	match := func(s string) bool {
		if strings.Contains(s, clockOK) {
			return false
		}
		for _, re := range clockSubtractions {
			if re.MatchString(s) {
				return true
			}
		}
		return false
	}
	for _, s := range bad {
		if !match(s) {
			t.Errorf("not caught: %s", s)
		}
	}
	for _, s := range good {
		if match(s) {
			t.Errorf("caught, but right: %s", s)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
