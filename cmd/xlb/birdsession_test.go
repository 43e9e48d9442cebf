// SPDX-License-Identifier: Apache-2.0
package main

import "testing"

func TestSameBirdSession(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a BGP --- up 03:41:07.555 Established", "a BGP --- up 03:41:07.554 Established", true},
		{"a BGP --- up 03:41:07.555 Established", "a BGP --- up 03:41:09.912 Established", false},
		{"a BGP --- up 03:41:07.555 Established", "a BGP --- start 03:41:07.555 Passive", false},
	} {
		if got := sameBirdSession(c.a, c.b); got != c.want {
			t.Errorf("%q vs %q: %v", c.a, c.b, got)
		}
	}
}
