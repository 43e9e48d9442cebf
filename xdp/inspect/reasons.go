// SPDX-License-Identifier: Apache-2.0
package inspect

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/xlb-dev/xlb/xdp/gateway"
)

// Reasons is `xlb show reasons`: the verdict counters that are not zero, by name.
type Reasons struct {
	Reasons map[string]uint64 `json:"reasons"`
}

// ReadReasons returns p's verdict counters that are not zero, summed over CPUs.
func ReadReasons(p *gateway.Pinned) (Reasons, error) {
	var doc Reasons
	rs, err := p.ReasonCounts()
	if err != nil {
		return doc, err
	}
	doc.Reasons = map[string]uint64{}
	for r, n := range rs {
		if n != 0 {
			doc.Reasons[r.String()] = n
		}
	}
	return doc, nil
}

// WriteText writes the counters by name.
func (doc Reasons) WriteText(w io.Writer) error {
	tw := newTable(w)
	for _, r := range slices.Sorted(maps.Keys(doc.Reasons)) {
		fmt.Fprintf(tw, "%s\t%d\n", r, doc.Reasons[r])
	}
	return tw.Flush()
}
