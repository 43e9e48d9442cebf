// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// Document is one part of `xlb show`: encoded as JSON as it is, or written as text tables.
type Document interface {
	// WriteText writes the document as text tables.
	WriteText(w io.Writer) error
}

// The documents.
var (
	_ Document = Services{}
	_ Document = Flows{}
	_ Document = Reasons{}
	_ Document = Explanation{}
	_ Document = Agent{}
	_ Document = DSR{}
)

// newTable returns the tabwriter every document's tables are aligned by.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// endpointString is addr:port, with IPv6 addresses in brackets, and port 0 (all ports, or the
// client's port kept) as "*".
func endpointString(a netip.Addr, port uint16) string {
	if port == 0 {
		if a.Is6() {
			return "[" + a.String() + "]:*"
		}
		return a.String() + ":*"
	}
	return netip.AddrPortFrom(a, port).String()
}

// frontendString is a frontend as endpointString writes it, with its protocol.
func frontendString(f datapath.Frontend) string {
	return endpointString(f.Addr, f.Port) + "/" + f.Proto.String()
}

// idleString rounds an idle time for reading.
func idleString(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(time.Millisecond)
}
