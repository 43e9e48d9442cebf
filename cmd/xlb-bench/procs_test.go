// SPDX-License-Identifier: Apache-2.0
package main

import (
	"testing"
	"time"
)

// TestParseProcStat: a name with spaces and parentheses, own and reaped children's ticks.
func TestParseProcStat(t *testing.T) {
	line := "4242 (go (build) x) R 1 2 3 4 5 6 7 8 9 10 150 50 30 20 20 0 1 0 100 0 0\n"
	p, ok := parseProcStat(line)
	if !ok || p.comm != "go (build) x" || p.cpu != 250*procTick {
		t.Fatalf("parsed %+v, %v; want go (build) x, 2.5s", p, ok)
	}
	if _, ok := parseProcStat("4242 (x) R 1 2"); ok {
		t.Error("a short line parsed")
	}
}

// TestTopOthers: the processes that took the most CPU between two readings, summed by name, a
// process new since the first reading counted whole, a reused pid (another name) as new, and no
// process for more than the CPUs could give it.
// (A reaper whose children ran long before the window: capped at 2 CPUs.)
func TestTopOthers(t *testing.T) {
	before := map[int]procCPU{1: {"cc1", time.Second}, 2: {"go", 2 * time.Second}, 3: {"idle", time.Second}, 4: {"old", 5 * time.Second}}
	after := map[int]procCPU{1: {"cc1", 3 * time.Second}, 2: {"go", 3 * time.Second}, 3: {"idle", time.Second},
		4: {"cc1", 500 * time.Millisecond}, 5: {"go", 2 * time.Second}}
	got := topOthers(before, after, 10*time.Second, 2, 2)
	if len(got) != 2 || got[0] != "go 30%" || got[1] != "cc1 25%" {
		t.Errorf("top others %q, want [go 30%% cc1 25%%]", got)
	}
	after[6] = procCPU{"reaper", time.Hour}
	if got := topOthers(before, after, 10*time.Second, 2, 1); len(got) != 1 || got[0] != "reaper 200%" {
		t.Errorf("top others %q, want [reaper 200%%]", got)
	}
}
