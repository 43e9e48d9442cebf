// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// FieldManager is the server-side apply field manager ApplyFile uses.
const FieldManager = "xlb-kubetest"

// ApplyFile applies every object of the multi-document YAML manifest at path, in order, as
// cfg's user, with server-side apply (so any kind the apiserver serves works, and applying
// twice is harmless). Namespaced objects without a namespace go to "default".
func ApplyFile(ctx context.Context, cfg *rest.Config, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	defer f.Close()
	objs, err := decodeManifest(f)
	if err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	if err := Apply(ctx, cfg, objs...); err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	return nil
}

// Apply applies objs, in order, as cfg's user with server-side apply.
func Apply(ctx context.Context, cfg *rest.Config, objs ...*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client for %s: %w", cfg.Host, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client for %s: %w", cfg.Host, err)
	}
	for _, obj := range objs {
		if err := applyOne(ctx, client, mapper, obj); err != nil {
			return err
		}
	}
	return nil
}

// applyOne maps obj's kind to its resource and applies it.
func applyOne(ctx context.Context, client dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	what := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		mapper.Reset() // a CustomResourceDefinition applied earlier may have added the kind
		m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return fmt.Errorf("%s: find the resource for %s: %w", what, gvk, err)
	}
	var ri dynamic.ResourceInterface = client.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		what = fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
		ri = client.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// decodeManifest splits a multi-document YAML stream into objects, skipping empty documents.
func decodeManifest(r io.Reader) ([]*unstructured.Unstructured, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for n := 1; ; n++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(js)) == 0 || bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		objs = append(objs, obj)
	}
}
