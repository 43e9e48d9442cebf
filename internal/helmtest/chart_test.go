// SPDX-License-Identifier: Apache-2.0
package helmtest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"

	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/internal/helmtest"
	"github.com/xlb-dev/xlb/lb/config"
)

// findHelm returns make helm-bin's helm, failing t (never skipping it) when it is not built.
func findHelm(t *testing.T) helmtest.Helm {
	t.Helper()
	h, err := helmtest.Find()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// repoRoot returns the repository's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := helmtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// chartDir returns the chart's directory.
func chartDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), helmtest.ChartDir)
}

// combination is one set of values the tests render: the chart's defaults (no file) or one of
// its ci/*-values.yaml.
type combination struct {
	name string
	file string // "" = the defaults
}

// combinations returns the defaults and every ci/*-values.yaml of the chart; it fails t when
// the main ones are missing, so that a renamed file cannot silently drop its checks.
func combinations(t *testing.T) []combination {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	combos := []combination{{name: "defaults"}}
	for _, f := range files {
		combos = append(combos, combination{name: strings.TrimSuffix(filepath.Base(f), "-values.yaml"), file: f})
	}
	for _, want := range []string{"agent-only", "gateway-only", "both-dsr", "afxdp"} {
		if !slices.ContainsFunc(combos, func(c combination) bool { return c.name == want }) {
			t.Fatalf("the chart has no ci/%s-values.yaml", want)
		}
	}
	return combos
}

func (c combination) render(repo string) helmtest.Render {
	r := helmtest.Render{Chart: filepath.Join(repo, helmtest.ChartDir), IncludeCRDs: true}
	if c.file != "" {
		r.ValuesFiles = []string{c.file}
	}
	return r
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("read a document: %v", err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("document %q: %v", doc, err)
		}
		if s := strings.TrimSpace(string(js)); s == "" || s == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			t.Fatalf("document %s: %v", js, err)
		}
		objs = append(objs, obj)
	}
}

// rendered is a rendering's objects by "Kind namespace/name" (or "Kind name").
type rendered map[string]*unstructured.Unstructured

func index(objs []*unstructured.Unstructured) rendered {
	r := make(rendered, len(objs))
	for _, o := range objs {
		r[key(o)] = o
	}
	return r
}

func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}

func (r rendered) keys() []string {
	ks := make([]string, 0, len(r))
	for k := range r {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// typed converts the object at k into out, failing t when it is absent.
func (r rendered) typed(t *testing.T, k string, out any) {
	t.Helper()
	o, ok := r[k]
	if !ok {
		t.Fatalf("no %s among %v", k, r.keys())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("%s: %v", k, err)
	}
}

// template renders r and decodes the output.
func template(t *testing.T, h helmtest.Helm, r helmtest.Render) rendered {
	t.Helper()
	out, err := h.Template(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	return index(decode(t, out))
}

// crdFiles returns the YAML files of the chart's crds/ (none while there are no CRDs yet).
func crdFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml", "*.json"} {
		m, err := filepath.Glob(filepath.Join(chartDir(t), "crds", pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// crdNames returns the names of the CustomResourceDefinitions in the chart's crds/.
func crdNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, f := range crdFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decode(t, data) {
			if o.GetKind() != "CustomResourceDefinition" {
				t.Errorf("%s holds a %s: crds/ is for CustomResourceDefinitions", f, o.GetKind())
				continue
			}
			names = append(names, o.GetName())
		}
	}
	return names
}

// container returns the DaemonSet's only container.
func container(t *testing.T, ds *appsv1.DaemonSet) corev1.Container {
	t.Helper()
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet %s has %d containers, want 1", ds.Name, n)
	}
	return ds.Spec.Template.Spec.Containers[0]
}

// caps returns a container's added capabilities, sorted, and whether it drops ALL.
func caps(c corev1.Container) (added []string, dropsAll bool) {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return nil, false
	}
	for _, a := range c.SecurityContext.Capabilities.Add {
		added = append(added, string(a))
	}
	sort.Strings(added)
	return added, slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL")
}

// hostPathMount reports the host path mounted at mountPath in the DaemonSet's container.
func hostPathMount(t *testing.T, ds *appsv1.DaemonSet, mountPath string) string {
	t.Helper()
	c := container(t, ds)
	for _, m := range c.VolumeMounts {
		if m.MountPath != mountPath {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return v.HostPath.Path
			}
		}
	}
	return ""
}

// gatewayConfigs parses every file of the gateways' ConfigMap with xlb's own configuration
// parser, as xlb run would at start.
func gatewayConfigs(t *testing.T, r rendered) map[string]*config.Config {
	t.Helper()
	var cm corev1.ConfigMap
	r.typed(t, "ConfigMap xlb-system/xlb-gateway", &cm)
	cfgs := make(map[string]*config.Config, len(cm.Data))
	for name, data := range cm.Data {
		c, err := config.Parse(name, []byte(data))
		if err != nil {
			t.Fatalf("xlb refuses the chart's %s:\n%s\n%v", name, data, err)
		}
		cfgs[name] = c
	}
	return cfgs
}

func ifnames(c *config.Config) []string {
	var names []string
	for _, i := range c.Interfaces {
		names = append(names, i.Name+":"+i.Role.String())
	}
	return names
}

// mustJSON marshals v, failing t when it cannot.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// keysOf returns m's keys, sorted.
func keysOf[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
