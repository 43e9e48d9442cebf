// SPDX-License-Identifier: Apache-2.0
package speaker

import (
	"fmt"
	"os"
	"strings"

	"github.com/xlb-dev/xlb/bgp"
)

// maxPassword is the longest TCP MD5 password the kernel takes (TCP_MD5SIG_MAXKEYLEN).
const maxPassword = 80

// password returns p's TCP MD5 password: its Password, or read from its PasswordFile ("" when
// there is none).
func password(p bgp.Peer) (string, error) {
	if p.Password != "" {
		if len(p.Password) > maxPassword {
			return "", fmt.Errorf("peer %v: password: longer than %d bytes", p.Address, maxPassword)
		}
		return p.Password, nil
	}
	if p.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(p.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("peer %v: passwordFile: %w", p.Address, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("peer %v: passwordFile %s: empty", p.Address, p.PasswordFile)
	}
	if len(pw) > maxPassword {
		return "", fmt.Errorf("peer %v: passwordFile %s: longer than %d bytes", p.Address, p.PasswordFile, maxPassword)
	}
	return pw, nil
}
