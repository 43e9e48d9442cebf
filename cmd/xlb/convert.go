package main

import (
	"flag"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
)

// convertPriorityStep spaces the priorities of converted pools, so that a pool can be put
// between two of them later without renumbering.
const convertPriorityStep = 10

// convertCLI is `xlb convert`: the Kubernetes objects equivalent to a gateway file's sections
// that belong in the cluster (today: pools → AddressPool), as a YAML stream for kubectl apply.
func convertCLI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "the gateway's YAML configuration `file` (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "xlb convert: %v\n", err)
		return 1
	}
	out, err := convertPools(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "xlb convert: %v\n", err)
		return 1
	}
	if len(cfg.Pools) == 0 {
		fmt.Fprintf(stderr, "xlb convert: %s has no pools: nothing to convert\n", *cfgPath)
	}
	fmt.Fprint(stdout, out)
	return 0
}

// convertPools returns cfg's pools as AddressPool objects, a YAML stream: in file order, with
// priorities 0, 10, 20… so the allocator tries them in the file's order.
func convertPools(cfg *config.Config) (string, error) {
	var out string
	for i, p := range cfg.Pools {
		o := kube.AddressPoolObject(kube.Pool{Pool: p.IPAM(), Route: p.Route}, int32(i*convertPriorityStep))
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o)
		if err != nil {
			return "", fmt.Errorf("pool %s: %w", p.Name, err)
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return "", fmt.Errorf("pool %s: %w", p.Name, err)
		}
		out += fmt.Sprintf("---\n# pools[%d] of the gateways' file\n%s", i, b)
	}
	return out, nil
}
