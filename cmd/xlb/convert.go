package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
)

// convertPriorityStep spaces the priorities of converted pools, so that a pool can be put
// between two of them later without renumbering.
const convertPriorityStep = 10

// convertCLI is `xlb convert`: the Kubernetes objects equivalent to a gateway file's sections
// that belong in the cluster, as a YAML stream for kubectl apply: pools → AddressPool; bgp
// peers → BGPPeer (selecting this gateway by name; an MD5 password file → a Secret);
// the bgp section's route attributes → a BGPAdvertisement for this gateway.
func convertCLI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xlb convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "the gateway's YAML configuration `file` (required)")
	gateway := fs.String("gateway", "", "the gateway's `name` the BGP objects select (default: the file's kubernetes.gatewayName, else the host name)")
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
	name, namespace := *gateway, "xlb-system"
	if cfg.Kubernetes != nil {
		namespace = cfg.Kubernetes.LeaderElection.Namespace
		if name == "" {
			if name, err = cfg.Kubernetes.Identity(); err != nil {
				fmt.Fprintf(stderr, "xlb convert: %v\n", err)
				return 1
			}
		}
	}
	if name == "" && cfg.BGP != nil {
		if name, err = os.Hostname(); err != nil {
			fmt.Fprintf(stderr, "xlb convert: --gateway is needed (no kubernetes.gatewayName, no host name: %v)\n", err)
			return 1
		}
	}
	out, secrets, err := convertConfig(cfg, name, namespace)
	if err != nil {
		fmt.Fprintf(stderr, "xlb convert: %v\n", err)
		return 1
	}
	if out == "" {
		fmt.Fprintf(stderr, "xlb convert: %s has no pools and no bgp section: nothing to convert\n", *cfgPath)
	}
	if secrets > 0 {
		fmt.Fprintf(stderr, "xlb convert: the output holds %d Secret(s) with BGP passwords (namespace %s): handle it as you handle them\n", secrets, namespace)
	}
	fmt.Fprint(stdout, out)
	return 0
}

// convertConfig returns cfg's pools as AddressPool objects (in file order, priorities 0, 10,
// 20…), its BGP peers as BGPPeer objects selecting gateway (with a Secret in namespace per
// password file) and its bgp route attributes as a BGPAdvertisement for gateway: a YAML stream,
// and how many Secrets it holds.
func convertConfig(cfg *config.Config, gateway, namespace string) (string, int, error) {
	var b strings.Builder
	emit := func(comment string, o any) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "---\n# %s\n%s", comment, y)
		return nil
	}
	for i, p := range cfg.Pools {
		o := kube.AddressPoolObject(kube.Pool{Pool: p.IPAM(), Route: p.Route}, int32(i*convertPriorityStep))
		if err := emit(fmt.Sprintf("pools[%d] of the gateways' file", i), &o); err != nil {
			return "", 0, fmt.Errorf("pool %s: %w", p.Name, err)
		}
	}
	secrets := 0
	if c := cfg.BGP; c != nil {
		for i, p := range c.Peers {
			name := gateway + "-" + addrName(p.Address)
			secret := ""
			if p.PasswordFile != "" {
				pw, err := os.ReadFile(p.PasswordFile)
				if err != nil {
					return "", 0, fmt.Errorf("bgp.peers[%d]: %w", i, err)
				}
				secret = "xlb-bgp-" + name
				s := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
					ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: namespace},
					StringData: map[string]string{kube.DefaultPasswordKey: strings.TrimRight(string(pw), "\r\n")}}
				if err := emit(fmt.Sprintf("the TCP MD5 password of bgp.peers[%d] (%s)", i, p.PasswordFile), s); err != nil {
					return "", 0, err
				}
				secrets++
			}
			o := kube.BGPPeerObject(name, gateway, p, secret)
			if err := emit(fmt.Sprintf("bgp.peers[%d] of gateway %s", i, gateway), &o); err != nil {
				return "", 0, fmt.Errorf("bgp.peers[%d]: %w", i, err)
			}
		}
		attrs := lb.RouteAttributes{Communities: c.Communities, LargeCommunities: c.LargeCommunities, LocalPref: c.LocalPref, MED: c.MED}
		if !attrs.IsZero() {
			o := kube.BGPAdvertisementObject(gateway+"-bgp", gateway, attrs)
			if err := emit(fmt.Sprintf("the route attributes of gateway %s's bgp section", gateway), &o); err != nil {
				return "", 0, err
			}
		}
	}
	return b.String(), secrets, nil
}

// addrName writes an address as a DNS label: 198-18-0-254, 2001-db8--fe.
func addrName(a netip.Addr) string {
	return strings.NewReplacer(".", "-", ":", "-").Replace(a.String())
}
