// SPDX-License-Identifier: Apache-2.0

// Command xlb is the xlb load-balancer appliance: the gateway daemon (xlb run), the node agent
// (xlb agent) and the tools that inspect and convert what they run. `xlb --help` lists the
// commands; `xlb COMMAND --help` gives one's flags, with their defaults, and examples.
//
// See docs/appliance.md, deploy/xlb.example.yaml and deploy/xlb.kubernetes.example.yaml.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stderr))
}

// cli runs xlb with args (without the program's name), printing results to stdout and
// diagnostics to stderr; it returns the exit code: 0, 1 when the command failed, 2 when the
// command line is wrong.
func cli(args []string, stderr io.Writer) int {
	return execute(args, os.Stdout, stderr)
}

// newRoot returns the xlb command with every subcommand. A new subcommand is a constructor in
// its own file and one line here.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "xlb",
		Short: "An XDP load balancer for bare-metal Kubernetes: gateway daemon, node agent and tools",
		Long: `xlb gives LoadBalancer Services addresses from AddressPools, announces them over BGP
from every gateway and forwards their packets in XDP straight to the Pods, keeping the
client's address. Every node runs the agent (socket-level load balancing of cluster IPs and
the node side of direct server return).`,
		Version:       buildInfo().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// No Args: cobra then refuses an unknown command ("unknown command ... for xlb").
	}
	var b strings.Builder
	printVersion(&b, buildInfo(), false)
	root.SetVersionTemplate(b.String())
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newRunCmd(),
		newAgentCmd(),
		newCleanupCmd(),
		newShowCmd(),
		newBGPCmd(),
		newBFDCmd(),
		newConvertCmd(),
		newVersionCmd(),
		newManCmd(),
	)
	return root
}

// usageError is a wrong command line found by a command itself (a missing or bad flag): exit
// code 2, as the errors cobra finds before a command runs.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with the message of fmt.Errorf(format, a...).
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// execute runs the xlb command line args and returns its exit code; an error is printed to
// stderr after the command's path ("xlb show flow: ...").
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	ran := false
	// Cobra runs this after it parsed the flags and checked the arguments: an error before it
	// is the command line's.
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var u usageError
	if !ran || errors.As(err, &u) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return 2
	}
	return 1
}
