// SPDX-License-Identifier: Apache-2.0
package vmtest

import (
	"fmt"
	"sort"
	"strings"
)

// Table renders results as markdown: kernel × program (loaded, verified instructions), then
// kernel × test package (passed / failed / skipped).
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("# Kernel matrix\n\n")
	b.WriteString("| kernel | release | uptime at start (s) | finished |\n|---|---|---|---|\n")
	for _, r := range results {
		fin := "yes"
		if r.Err != "" {
			fin = "no: " + r.Err
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Kernel, r.Release, r.Uptime, fin)
	}
	// Programs: one row per object/program, one column per kernel.
	type key struct{ obj, prog string }
	var keys []key
	seen := map[key]bool{}
	cells := map[key]map[string]ProgramResult{}
	for _, r := range results {
		for _, p := range r.Programs {
			k := key{p.Object, p.Program}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
				cells[k] = map[string]ProgramResult{}
			}
			cells[k][r.Kernel] = p
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].obj != keys[j].obj {
			return keys[i].obj < keys[j].obj
		}
		return keys[i].prog < keys[j].prog
	})
	b.WriteString("\n## Programs: loaded alone with the object's defaults, verified instructions\n\n| object | program |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Kernel)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(results)) + "\n")
	var notes []string
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %s |", k.obj, k.prog)
		for _, r := range results {
			p, ok := cells[k][r.Kernel]
			switch {
			case !ok:
				b.WriteString(" – |")
			case p.Loaded:
				fmt.Fprintf(&b, " ✓ %d |", p.Insns)
			default:
				notes = append(notes, fmt.Sprintf("%s %s/%s: %s", r.Kernel, k.obj, k.prog, p.Reason))
				fmt.Fprintf(&b, " ✗ [%d] |", len(notes))
			}
		}
		b.WriteString("\n")
	}
	for i, n := range notes {
		fmt.Fprintf(&b, "\n[%d] %s\n", i+1, strings.ReplaceAll(n, "|", "\\|"))
	}
	// Tests.
	var pkgs []string
	seenPkg := map[string]bool{}
	for _, r := range results {
		for _, s := range r.Suites {
			if !seenPkg[s.Name] {
				seenPkg[s.Name] = true
				pkgs = append(pkgs, s.Name)
			}
		}
	}
	b.WriteString("\n## Tests run in the guest: passed / failed / skipped\n\n| package |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.Kernel)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	var failed []string
	for _, p := range pkgs {
		fmt.Fprintf(&b, "| %s |", p)
		for _, r := range results {
			cell := " – |"
			for _, s := range r.Suites {
				if s.Name != p {
					continue
				}
				mark := ""
				if !s.Finished {
					mark = " (cut off)"
				} else if s.RC != 0 && s.Fail == 0 {
					mark = fmt.Sprintf(" (rc %d)", s.RC)
				}
				cell = fmt.Sprintf(" %d / %d / %d%s |", s.Pass, s.Fail, s.Skip, mark)
				if len(s.Failed) > 0 {
					failed = append(failed, fmt.Sprintf("%s %s: %s", r.Kernel, p, strings.Join(s.Failed, " ")))
				}
			}
			b.WriteString(cell)
		}
		b.WriteString("\n")
	}
	if len(failed) > 0 {
		b.WriteString("\nFailed tests:\n\n")
		for _, f := range failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// AllPassed reports whether every guest finished and every test binary exited 0.
func AllPassed(results []Result) bool {
	for _, r := range results {
		if r.Err != "" {
			return false
		}
		for _, s := range r.Suites {
			if !s.Finished || s.RC != 0 {
				return false
			}
		}
	}
	return true
}
