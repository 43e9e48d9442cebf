// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"strings"
	"testing"
)

func TestDecodeManifest(t *testing.T) {
	objs, err := decodeManifest(strings.NewReader(`# leading comment
---
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
---
# only a comment
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: a}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if strings.Join(got, " ") != "Namespace/a Service/s" {
		t.Errorf("decoded %v, want [Namespace/a Service/s]", got)
	}
	if _, err := decodeManifest(strings.NewReader("kind: [")); err == nil {
		t.Error("decoded invalid YAML without an error")
	}
}

func TestSameGroups(t *testing.T) {
	have := []string{"b", "a", "system:authenticated"}
	if !sameGroups(have, []string{"a", "b"}) || !sameGroups(have, []string{"b", "system:authenticated", "a"}) {
		t.Error("same groups in another order, or without system:authenticated, do not match")
	}
	if sameGroups(have, []string{"a"}) || sameGroups(have, []string{"a", "b", "c"}) {
		t.Error("different groups match")
	}
}
