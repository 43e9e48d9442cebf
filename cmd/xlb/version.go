// SPDX-License-Identifier: Apache-2.0
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is xlb's release version, set when linking (make: -ldflags "-X main.version=$(git
// describe)"). Left empty, the version is the module's as Go recorded it, or "devel".
var version = ""

// BuildInfo is what `xlb version` reports: the version, the commit the binary was built from
// and how it was built (Go's build settings: CGO_ENABLED, GOARCH, -trimpath, -ldflags...).
type BuildInfo struct {
	Version    string            `json:"version"`
	Commit     string            `json:"commit,omitempty"`
	CommitTime string            `json:"commitTime,omitempty"`
	Modified   bool              `json:"modified,omitempty"` // built from a tree with uncommitted changes
	GoVersion  string            `json:"goVersion"`
	Platform   string            `json:"platform"`
	Settings   map[string]string `json:"settings,omitempty"`
}

// buildInfo reads this binary's BuildInfo.
func buildInfo() BuildInfo {
	b := BuildInfo{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "devel"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	if b.Version == "" || b.Version == "(devel)" {
		b.Version = "devel"
	}
	b.Settings = map[string]string{}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs":
		default:
			b.Settings[s.Key] = s.Value
		}
	}
	return b
}

// printVersion writes b: one line per field, or JSON.
func printVersion(w io.Writer, b BuildInfo, asJSON bool) {
	if asJSON {
		out, _ := json.MarshalIndent(b, "", "  ")
		fmt.Fprintf(w, "%s\n", out)
		return
	}
	commit := b.Commit
	if commit == "" {
		commit = "unknown"
	} else if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "xlb %s\ncommit %s", b.Version, commit)
	if b.CommitTime != "" {
		fmt.Fprintf(w, " %s", b.CommitTime)
	}
	fmt.Fprintf(w, "\n%s %s\n", b.GoVersion, b.Platform)
	for _, k := range []string{"CGO_ENABLED", "-trimpath", "-ldflags", "-tags"} {
		if v, ok := b.Settings[k]; ok {
			fmt.Fprintf(w, "%s=%s\n", k, v)
		}
	}
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, the commit and the build settings",
		Long: `Print xlb's version, the commit it was built from (and whether the tree had uncommitted
changes), the Go version, the platform and the build settings.`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			printVersion(cmd.OutOrStdout(), buildInfo(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
