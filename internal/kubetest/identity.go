// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
)

// The identities every control plane registers in its token file.
const (
	// AdminUser is the cluster administrator (group system:masters).
	AdminUser = "admin"
	// ControllerNamespace is the namespace the xlb controller runs in.
	ControllerNamespace = "xlb-system"
	// ControllerServiceAccount is the xlb controller's ServiceAccount name.
	ControllerServiceAccount = "xlb"
	// ControllerUser is the user name the apiserver gives the xlb controller's ServiceAccount.
	ControllerUser = "system:serviceaccount:" + ControllerNamespace + ":" + ControllerServiceAccount
)

// SpareUsers returns the unprivileged users (group system:authenticated only) every control
// plane registers, for tests to grant permissions to: user-1, user-2 and user-3.
func SpareUsers() []string { return []string{"user-1", "user-2", "user-3"} }

// Identity is a user the apiserver authenticates by a bearer token from its token file.
type Identity struct {
	// User is the user name.
	User string
	// Groups are the user's groups, system:authenticated included.
	Groups []string
	// Token is the bearer token, random per control plane.
	Token string
}

// newIdentities returns the identities a control plane registers, with fresh tokens.
func newIdentities() ([]Identity, error) {
	ids := []Identity{
		{User: AdminUser, Groups: []string{"system:masters", "system:authenticated"}},
		{User: ControllerUser, Groups: []string{
			"system:serviceaccounts",
			"system:serviceaccounts:" + ControllerNamespace,
			"system:authenticated",
		}},
	}
	for _, u := range SpareUsers() {
		ids = append(ids, Identity{User: u, Groups: []string{"system:authenticated"}})
	}
	for i := range ids {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("token for %s: %w", ids[i].User, err)
		}
		ids[i].Token = hex.EncodeToString(b)
	}
	return ids, nil
}

// writeTokenFile writes ids in kube-apiserver's --token-auth-file format:
// token,user,uid,"group1,group2".
func writeTokenFile(path string, ids []Identity) error {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", id.Token, id.User, id.User, strings.Join(id.Groups, ","))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write token file %s: %w", path, err)
	}
	return nil
}

// sameGroups reports whether a registered identity's groups are exactly want, ignoring
// system:authenticated, which every authenticated user has.
func sameGroups(have, want []string) bool {
	norm := func(gs []string) []string {
		out := slices.DeleteFunc(slices.Clone(gs), func(g string) bool { return g == "system:authenticated" })
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(norm(have), norm(want))
}
