// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Admin returns a client configuration for the cluster administrator (group system:masters).
func (cp *ControlPlane) Admin() *rest.Config {
	return cp.As(AdminUser, "system:masters")
}

// Controller returns a client configuration for the xlb controller's ServiceAccount,
// xlb-system/xlb, with the groups the apiserver gives a ServiceAccount.
func (cp *ControlPlane) Controller() *rest.Config {
	return cp.As(ControllerUser, "system:serviceaccounts", "system:serviceaccounts:"+ControllerNamespace)
}

// As returns a client configuration that acts as user with groups (system:authenticated is
// implied); with Options.NetNS it dials from inside that namespace. A registered identity (see Identities) with exactly those groups authenticates with
// its own token; any other is impersonated by the admin, which the apiserver authorizes as
// that user and groups too.
func (cp *ControlPlane) As(user string, groups ...string) *rest.Config {
	cfg := &rest.Config{
		Host:            cp.url,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), cp.caPEM...)},
		UserAgent:       "xlb-kubetest/" + user,
		QPS:             -1, // no client-side rate limit: tests burst
	}
	if cp.netns != "" {
		cfg.Dial = cp.dialer()
	}
	for _, id := range cp.identities {
		if id.User == user && sameGroups(id.Groups, groups) {
			cfg.BearerToken = id.Token
			return cfg
		}
	}
	cfg.BearerToken = cp.token(AdminUser)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string(nil), groups...)}
	return cfg
}

// WriteKubeconfig writes cfg as a kubeconfig file at path, for another process (xlb run,
// kubectl) to connect with. Only the address, CA, bearer token and impersonation are kept (not
// a Dial function: the other process connects from its own network namespace). The
// impersonated user's extra (e.g. the node name a bound ServiceAccount token carries) is kept.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	const name = "xlb-kubetest"
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
		CertificateAuthority:     cfg.CAFile,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token:                cfg.BearerToken,
		TokenFile:            cfg.BearerTokenFile,
		Impersonate:          cfg.Impersonate.UserName,
		ImpersonateGroups:    cfg.Impersonate.Groups,
		ImpersonateUserExtra: cfg.Impersonate.Extra,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig for %s to %s: %w", cfg.Host, path, err)
	}
	return nil
}
