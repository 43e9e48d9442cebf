// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// AnnotationDSR is the annotation a node agent puts on its own Node once the node side of
// direct server return (xdp/dsr) is attached and accepts the carriers of its endpoints: its
// value is the carrier format version the node reads (DSRCarrierVersion). The gateways'
// controller flags a backend DSR (lb.Backend.DSR) only when its Node carries it with a version
// they write.
const AnnotationDSR = "xlb.dev/dsr"

// DSRCarrierVersion is the carrier format (xdp/datapath's CarrierOpt*; docs/dsr.md) this build
// reads on the node and writes at the gateway.
const DSRCarrierVersion = "v1"

// NodeDSR reports whether n's agent serves direct server return with this build's carrier:
// AnnotationDSR is DSRCarrierVersion.
func NodeDSR(n *corev1.Node) bool {
	return n != nil && n.Annotations[AnnotationDSR] == DSRCarrierVersion
}

// SetNodeDSR publishes (on) or withdraws the node agent's direct server return capability on
// Node node: AnnotationDSR set to DSRCarrierVersion, or removed. It reads the Node first and
// writes (a JSON merge patch of that one annotation, touching nothing else) only when the
// annotation differs. It returns the Node as it then is.
func SetNodeDSR(ctx context.Context, client kubernetes.Interface, node string, on bool) (*corev1.Node, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: read it to set annotation %s: %w", node, AnnotationDSR, err)
	}
	v, has := n.Annotations[AnnotationDSR]
	if (on && has && v == DSRCarrierVersion) || (!on && !has) {
		return n, nil
	}
	var value any // null removes the key
	if on {
		value = DSRCarrierVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationDSR: value}}})
	if err != nil {
		return nil, fmt.Errorf("node %s: annotation patch: %w", node, err)
	}
	n, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "xlb-agent"})
	if err != nil {
		what := "set"
		if !on {
			what = "remove"
		}
		return nil, fmt.Errorf("node %s: %s annotation %s: %w", node, what, AnnotationDSR, err)
	}
	return n, nil
}
