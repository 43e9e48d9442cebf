// SPDX-License-Identifier: Apache-2.0
package report

import (
	"encoding/json"
	"fmt"
	"os"
)

// WriteJSON writes the report, every sample and drop counter included, to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return nil
}
