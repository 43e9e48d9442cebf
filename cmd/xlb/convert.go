// SPDX-License-Identifier: Apache-2.0
package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/spf13/cobra"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
)

// convertPriorityStep spaces the priorities of converted pools, so that a pool can be put
// between two of them later without renumbering.
const convertPriorityStep = 10

// convertCLI runs `xlb convert` with args (after "convert"); it returns the exit code.
func convertCLI(args []string, stdout, stderr io.Writer) int {
	return execute(append([]string{"convert"}, args...), stdout, stderr)
}

// newConvertCmd is `xlb convert`: the Kubernetes objects equivalent to a gateway file's
// sections that belong in the cluster, as a YAML stream for kubectl apply: pools →
// AddressPool; bgp peers → BGPPeer (selecting this gateway by name; an MD5 password file → a
// Secret); the bgp section's route attributes → a BGPAdvertisement for this gateway.
func newConvertCmd() *cobra.Command {
	var cfgPath, gateway string
	cmd := &cobra.Command{
		Use:   "convert --config FILE [--gateway NAME]",
		Short: "Print the cluster objects equivalent to a gateway file's pools and BGP peers",
		Long: `Print, as YAML for kubectl apply, the objects (xlb.dev/v1alpha1) equivalent to FILE's
sections that belong in the cluster in Kubernetes mode: pools → AddressPools (in file order);
bgp.peers → BGPPeers selecting this gateway (NAME, default kubernetes.gatewayName or the host
name), each passwordFile → a Secret; the bgp section's communities, localPref and med → a
BGPAdvertisement for this gateway.

Apply the output, then remove those sections from the file and reload it (SIGHUP): no address
changes hands and no session is reset, but a session with a password once (its password now
comes from the Secret).`,
		Example: `  xlb convert --config /etc/xlb/xlb.yaml | kubectl apply -f -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stderr := cmd.ErrOrStderr()
			if cfgPath == "" {
				return usagef("--config is required")
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			name, namespace := gateway, "xlb-system"
			if cfg.Kubernetes != nil {
				namespace = cfg.Kubernetes.LeaderElection.Namespace
				if name == "" {
					if name, err = cfg.Kubernetes.Identity(); err != nil {
						return err
					}
				}
			}
			if name == "" && cfg.BGP != nil {
				if name, err = os.Hostname(); err != nil {
					return fmt.Errorf("--gateway is needed (no kubernetes.gatewayName, no host name: %w)", err)
				}
			}
			out, secrets, err := convertConfig(cfg, name, namespace)
			if err != nil {
				return err
			}
			if out == "" {
				fmt.Fprintf(stderr, "xlb convert: %s has no pools and no bgp section: nothing to convert\n", cfgPath)
			}
			if secrets > 0 {
				fmt.Fprintf(stderr, "xlb convert: the output holds %d Secret(s) with BGP passwords (namespace %s): handle it as you handle them\n", secrets, namespace)
			}
			fmt.Fprint(cmd.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "the gateway's YAML configuration `file` (required)")
	cmd.Flags().StringVar(&gateway, "gateway", "", "the gateway's `name` the BGP objects select (default: the file's kubernetes.gatewayName, else the host name)")
	return cmd
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
