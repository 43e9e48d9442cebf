// SPDX-License-Identifier: Apache-2.0
package lab

import (
	"strings"
	"testing"
	"time"
)

// TestTimeScale: Options.TimeScale multiplies a start-up bound (0 and 1 leave it as it is), and
// New refuses a scale outside 0..MaxTimeScale before it builds anything.
func TestTimeScale(t *testing.T) {
	for _, c := range []struct {
		scale int
		want  time.Duration
	}{{0, 20 * time.Second}, {1, 20 * time.Second}, {6, 120 * time.Second}, {MaxTimeScale, 400 * time.Second}} {
		s := &Site{Opts: Options{TimeScale: c.scale}}
		if got := s.bound(20 * time.Second); got != c.want {
			t.Errorf("scale %d: bound(20s) = %v, want %v", c.scale, got, c.want)
		}
	}
	for _, scale := range []int{-1, MaxTimeScale + 1} {
		_, err := New(Options{XLB: "/nonexistent/xlb", TimeScale: scale})
		if err == nil || !strings.Contains(err.Error(), "time scale") {
			t.Errorf("scale %d: New returned %v, want a time scale error", scale, err)
		}
	}
}
