// SPDX-License-Identifier: Apache-2.0
package helmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ChartDir is the chart's directory, relative to the repository's top.
const ChartDir = "deploy/helm/xlb"

// ManifestNamespace is the namespace the raw manifests install into.
const ManifestNamespace = "xlb-system"

// Manifest is one raw manifest of deploy/ and the chart templates it is rendered from.
type Manifest struct {
	// Path is the file, relative to the repository's top.
	Path string
	// Templates are the chart's templates whose documents it holds, in this order.
	Templates []string
	// Header is the comment the file starts with (each line "# ..."), before the generated
	// notice.
	Header string
}

// ManifestList returns the raw manifests make manifests writes from the chart's default values
// (with the namespace object: namespace.create=true) and TestManifests checks.
func ManifestList() []Manifest {
	return []Manifest{
		{
			Path:      "deploy/rbac.yaml",
			Templates: []string{"templates/namespace.yaml", "templates/gateway-rbac.yaml"},
			Header: `# The xlb-system namespace and the RBAC of the xlb controller (the gateways, xlb run in
# Kubernetes mode; docs/kubernetes.md): the least privilege it runs with, enforced by a real
# kube-apiserver in internal/kubetest's tests. Apply as a cluster administrator:
#   kubectl apply -f deploy/rbac.yaml
# The controller runs as the ServiceAccount xlb-system/xlb: in the cluster (the chart's
# gateway DaemonSet) or on an appliance with a kubeconfig for it (docs/install.md).`,
		},
		{
			Path:      "deploy/agent.yaml",
			Templates: []string{"templates/agent-rbac.yaml", "templates/agent-daemonset.yaml"},
			Header: `# The xlb node agent (docs/agent.md): its RBAC, its admission policy and its DaemonSet, one
# agent per node. Apply as a cluster administrator, after deploy/rbac.yaml (which creates the
# xlb-system namespace):
#   kubectl apply -f deploy/agent.yaml
# The image is make image's (docs/install.md: import it on the nodes or copy it to a registry).
# The agent's options (external IPs, cluster IP ranges for apiservers before 1.33, direct server
# return on the nodes' uplinks, ...) are the chart's values (deploy/helm/xlb/values.yaml): install
# with helm, or render your own manifest with helm template.`,
		},
	}
}

// manifestLicense is each manifest's first line: the chart's license (internal/tools/spdx).
const manifestLicense = "# SPDX-License-Identifier: Apache-2.0\n"

// generatedNotice follows each manifest's header.
const generatedNotice = `#
# Generated from the Helm chart deploy/helm/xlb by make manifests (helm template with the
# chart's default values, namespace xlb-system): edit the chart, then run make manifests.
# internal/helmtest's TestManifests fails while this file and the chart differ.
`

// ManifestRender is the rendering the raw manifests come from.
func ManifestRender(repo string) Render {
	return Render{
		Chart:     filepath.Join(repo, ChartDir),
		Release:   "xlb",
		Namespace: ManifestNamespace,
		Set:       []string{"namespace.create=true"},
	}
}

// RenderManifests renders the chart as make manifests does and returns each raw manifest's
// content by its path relative to repo.
func RenderManifests(ctx context.Context, h Helm, repo string) (map[string][]byte, error) {
	out, err := h.Template(ctx, ManifestRender(repo))
	if err != nil {
		return nil, fmt.Errorf("render the manifests: %w", err)
	}
	docs, err := SplitSources(out)
	if err != nil {
		return nil, fmt.Errorf("render the manifests: %w", err)
	}
	list := ManifestList()
	files := make(map[string][]byte, len(list))
	used := make(map[string]bool)
	for _, m := range list {
		var b bytes.Buffer
		b.WriteString(manifestLicense)
		b.WriteString(m.Header)
		b.WriteString("\n")
		b.WriteString(generatedNotice)
		n := 0
		for _, t := range m.Templates {
			for _, d := range docs {
				if d.Template != t {
					continue
				}
				if n > 0 {
					b.WriteString("---\n")
				}
				b.WriteString(d.Text)
				n++
				used[t] = true
			}
		}
		for _, t := range m.Templates {
			if !used[t] {
				return nil, fmt.Errorf("render %s: the chart's %s rendered nothing", m.Path, t)
			}
		}
		files[m.Path] = b.Bytes()
	}
	return files, nil
}

// WriteManifests renders the raw manifests and writes them into repo.
func WriteManifests(ctx context.Context, h Helm, repo string) error {
	files, err := RenderManifests(ctx, h, repo)
	if err != nil {
		return err
	}
	for _, m := range ManifestList() {
		if err := os.WriteFile(filepath.Join(repo, m.Path), files[m.Path], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", m.Path, err)
		}
	}
	return nil
}

// Doc is one YAML document of helm template's output.
type Doc struct {
	// Template is the chart template it came from, relative to the chart ("templates/x.yaml"),
	// from helm's "# Source:" line.
	Template string
	// Text is the document without its "# Source:" line, ending in a newline.
	Text string
}

// SplitSources splits helm template's output into its documents, each with the template it
// came from. Documents with nothing but comments and blank lines are dropped.
func SplitSources(out []byte) ([]Doc, error) {
	var docs []Doc
	for i, part := range splitDocs(string(out)) {
		lines := strings.Split(part, "\n")
		var tmpl string
		var body []string
		for _, l := range lines {
			// helm template's "# Source: CHART/templates/x.yaml" before each document.
			if rest, ok := strings.CutPrefix(l, "# Source: "); ok && tmpl == "" {
				if _, t, ok := strings.Cut(rest, "/"); ok {
					tmpl = t
					continue
				}
			}
			body = append(body, l)
		}
		text := strings.Trim(strings.Join(body, "\n"), "\n") + "\n"
		if onlyComments(text) {
			continue
		}
		if tmpl == "" {
			return nil, fmt.Errorf("document %d of helm template's output has no # Source: line", i+1)
		}
		docs = append(docs, Doc{Template: tmpl, Text: text})
	}
	return docs, nil
}

// splitDocs splits a YAML stream at its "---" lines.
func splitDocs(s string) []string {
	var parts []string
	var cur []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimRight(l, " \t") == "---" {
			parts = append(parts, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	return append(parts, strings.Join(cur, "\n"))
}

// onlyComments reports whether a document holds nothing but comments and blank lines.
func onlyComments(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}
