// SPDX-License-Identifier: Apache-2.0
package main

// `xlb man`: the manual pages, made from the same command definitions as --help (the .deb
// ships them: internal/debpkg).

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func newManCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write the manual pages (section 8) of every command into DIR",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("--dir is required")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // reproducible: no date in the pages
			// The date of the pages: the commit's, so that a build is reproducible.
			date := time.Unix(0, 0).UTC()
			if t, err := time.Parse(time.RFC3339, buildInfo().CommitTime); err == nil {
				date = t.UTC()
			}
			hdr := &doc.GenManHeader{Date: &date, Title: "XLB", Section: "8", Source: "xlb " + buildInfo().Version, Manual: "System Administration"}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return fmt.Errorf("manual pages into %s: %w", dir, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the `directory` the pages are written to (xlb.8, xlb-run.8, ...)")
	return cmd
}
