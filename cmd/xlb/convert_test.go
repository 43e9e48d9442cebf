package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/xlb-dev/xlb/internal/kubetest"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// TestConvertRoundTrip: `xlb convert` of the Kubernetes example file gives AddressPool objects
// that the real apiserver accepts (CRDs installed, validation on) and that, read back as every
// gateway reads them, are the file's pools again, in the file's order.
func TestConvertRoundTrip(t *testing.T) {
	file := "../../deploy/xlb.kubernetes.example.yaml"
	var stdout, stderr bytes.Buffer
	if code := convertCLI([]string{"--config", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("xlb convert: exit %d: %s", code, stderr.String())
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) < 2 {
		t.Fatalf("the example has %d pools; the test wants at least 2", len(cfg.Pools))
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stdout.Bytes()), 4096)
	var objs []v1alpha1.AddressPool
	for {
		var o v1alpha1.AddressPool
		if err := dec.Decode(&o); err != nil {
			break
		}
		if o.Name == "" {
			continue
		}
		// Created in one apply, so in the same second: the age order falls back to the name.
		o.CreationTimestamp = metav1.NewTime(time.Unix(1, 0))
		objs = append(objs, o)
	}
	got, verdicts := kube.ObjectPools(objs, nil)
	var want []kube.Pool
	for _, p := range cfg.Pools {
		want = append(want, kube.Pool{Pool: p.IPAM(), Route: p.Route})
	}
	for name, v := range verdicts {
		if !v.Ready {
			t.Errorf("converted pool %s refused: %s", name, v.Message)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got  %+v\n want %+v\nfrom:\n%s", got, want, stdout.String())
	}

	cp := kubetest.StartT(t)
	if err := kubetest.InstallCRDs(t.Context(), cp.Admin(), "../../"+kubetest.CRDDir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(out, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.ApplyFile(t.Context(), cp.Admin(), out); err != nil {
		t.Fatalf("the apiserver refused xlb convert's output: %v", err)
	}

	// A file without pools: nothing to convert, said so.
	stdout.Reset()
	stderr.Reset()
	if code := convertCLI([]string{"--config", "../../deploy/xlb.example.yaml"}, &stdout, &stderr); code != 0 || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "no pools") {
		t.Errorf("convert of a file without pools: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
