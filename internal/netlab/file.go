// SPDX-License-Identifier: Apache-2.0
package netlab

import "os"

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0o644)
}
