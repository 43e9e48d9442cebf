// SPDX-License-Identifier: Apache-2.0
package run

import (
	"slices"
)

// Summary is the median and range of repeated measurements.
type Summary struct {
	Median, Min, Max float64
}

// Summarize summarizes xs (zero for none).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[len(s)-1]}
}

// SpreadPct is the range as a percentage of the median: (max - min) / median.
func (s Summary) SpreadPct() float64 {
	if s.Median == 0 {
		return 0
	}
	return 100 * (s.Max - s.Min) / s.Median
}
