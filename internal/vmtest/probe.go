// SPDX-License-Identifier: Apache-2.0
package vmtest

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

var (
	reProcessed = regexp.MustCompile(`processed (\d+) insns`)
	reFailedIn  = regexp.MustCompile(`program (\S+):`)
)

// Probe loads every program of every BPF object (*.o) under dir on the running kernel, with the
// object's default settings, and prints one XLB-PROG line per program: loaded or not, the
// verifier's processed-instruction count, and why it failed. A program the kernel rejects is
// taken out and the rest of its object loaded again, so one rejection does not hide the others.
func Probe(dir string, w io.Writer) error {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		fmt.Fprintf(w, "XLB-PROBE memlock: %v\n", err)
	}
	objs, err := filepath.Glob(filepath.Join(dir, "*.o"))
	if err != nil {
		return err
	}
	for _, obj := range objs {
		probeObject(obj, w)
	}
	return nil
}

func probeObject(path string, w io.Writer) {
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".o"), "_bpfel")
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		fmt.Fprintf(w, "XLB-PROG %s - loaded=0 insns=-1 reason=%s\n", name, oneLine(err.Error()))
		return
	}
	// Pinned maps are created unpinned: the probe measures loading, not adoption.
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
	}
	failed := map[string]string{}
	for range len(spec.Programs) + 1 {
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
			Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
		})
		if err == nil {
			names := make([]string, 0, len(coll.Programs))
			for n := range coll.Programs {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(w, "XLB-PROG %s %s loaded=1 insns=%d\n", name, n, insns(coll.Programs[n]))
			}
			coll.Close()
			break
		}
		m := reFailedIn.FindStringSubmatch(err.Error())
		if m == nil || spec.Programs[m[1]] == nil {
			// A map or the whole object failed: every remaining program is reported with it.
			for n := range spec.Programs {
				failed[n] = oneLine(err.Error())
			}
			break
		}
		failed[m[1]] = reason(err)
		drop(spec, m[1])
	}
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "XLB-PROG %s %s loaded=0 insns=-1 reason=%s\n", name, n, failed[n])
	}
}

// drop removes program p from spec, with the program-array entries that name it.
func drop(spec *ebpf.CollectionSpec, p string) {
	delete(spec.Programs, p)
	for _, m := range spec.Maps {
		kept := m.Contents[:0]
		for _, c := range m.Contents {
			if s, ok := c.Value.(string); ok && s == p {
				continue
			}
			kept = append(kept, c)
		}
		m.Contents = kept
	}
}

// insns is the number of instructions the verifier processed for p.
func insns(p *ebpf.Program) int {
	if info, err := p.Info(); err == nil {
		if n, ok := info.VerifiedInstructions(); ok && n > 0 {
			return int(n)
		}
	}
	if m := reProcessed.FindStringSubmatch(p.VerifierLog); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return -1
}

// reason is a rejection in one line: the verifier's last words when it has a log.
func reason(err error) string {
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) && len(verr.Log) > 0 {
		tail := verr.Log
		if len(tail) > 2 {
			tail = tail[len(tail)-2:]
		}
		msg := strings.Join(tail, " / ")
		if m := reProcessed.FindStringSubmatch(strings.Join(verr.Log, "\n")); m != nil && !strings.Contains(msg, "processed") {
			msg += " (processed " + m[1] + ")"
		}
		return oneLine(verr.Cause.Error() + ": " + msg)
	}
	return oneLine(err.Error())
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}
