// SPDX-License-Identifier: Apache-2.0
package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServiceClusterIPRange is the range the apiserver allocates ClusterIPs from. The addresses
// only exist in the apiserver's allocator: no traffic is ever sent to them.
const ServiceClusterIPRange = "10.96.0.0/24"

// Options say where and how a control plane runs. The zero value works.
type Options struct {
	// Dir holds the control plane's files (etcd data, keys, token file, logs). Empty: a new
	// temporary directory. Stop removes it unless KeepDir is set.
	Dir string
	// KeepDir keeps Dir after Stop (for reading the logs of a long-lived control plane).
	KeepDir bool
	// BinDir is where the binaries are cached (and built when missing). Empty: BinDir().
	BinDir string
	// Progress receives the build's output when the binaries must be built. Nil: os.Stderr.
	Progress io.Writer
	// StartTimeout bounds how long Start waits for etcd and for the apiserver's /readyz.
	// Zero: 90 seconds.
	StartTimeout time.Duration
	// APIServerFlags are appended to kube-apiserver's command line (a later flag wins).
	APIServerFlags []string
	// NetNS, if set, is the network namespace (a name under /run/netns) etcd and the
	// apiserver run in (`nsenter --net`), and that every connection to them is made from: the
	// readiness checks and the clients As returns dial inside it. Empty: this process's own.
	NetNS string
	// Address is the address the apiserver binds to and advertises, named in its serving
	// certificate and in URL; etcd stays on 127.0.0.1. The zero value means 127.0.0.1. In a
	// NetNS, a lab address there lets other namespaces reach the apiserver.
	Address netip.Addr
}

// ControlPlane is a running etcd and kube-apiserver (on 127.0.0.1, or as Options say).
type ControlPlane struct {
	dir     string
	keepDir bool
	// netns is Options.NetNS: where the processes run and connections are made from.
	netns string
	// url is the apiserver's https://address:port.
	url string
	// etcdURL is etcd's client URL.
	etcdURL string
	// caPEM is the CA certificate clients verify the apiserver with.
	caPEM []byte
	// identities are the users registered in the token file, by bearer token.
	identities []Identity
	// startup is how long Start took, binaries already built.
	startup time.Duration

	etcd, apiserver *process
	stopOnce        sync.Once
	stopErr         error
}

// Start starts etcd and kube-apiserver (building the binaries first if they are missing) and
// returns once the apiserver's /readyz passes. The processes run until Stop, until ctx is done,
// or until this process dies.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	bins, err := FindBinaries(ctx, opts.BinDir, opts.Progress)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	const attempts = 3
	for i := 1; ; i++ {
		cp, err := start(ctx, bins, opts)
		var taken portTakenError
		if err == nil || i == attempts || !errors.As(err, &taken) {
			return cp, err
		}
	}
}

// portTakenError marks a start that failed because a port chosen by freePorts was taken in
// the meantime: Start tries again with other ports.
type portTakenError struct{ err error }

func (e portTakenError) Error() string { return e.err.Error() }
func (e portTakenError) Unwrap() error { return e.err }

// start makes one attempt at starting the control plane.
func start(ctx context.Context, bins Binaries, opts Options) (_ *ControlPlane, err error) {
	began := time.Now()
	cp := &ControlPlane{dir: opts.Dir, keepDir: opts.KeepDir, netns: opts.NetNS}
	addr := opts.Address
	if !addr.IsValid() {
		addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if cp.dir == "" {
		if cp.dir, err = os.MkdirTemp("", "xlb-kubetest-"); err != nil {
			return nil, fmt.Errorf("control plane directory: %w", err)
		}
	} else if err := os.MkdirAll(cp.dir, 0o755); err != nil {
		return nil, fmt.Errorf("control plane directory %s: %w", cp.dir, err)
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	keys, err := writePKI(cp.dir, addr)
	if err != nil {
		return nil, fmt.Errorf("control plane keys in %s: %w", cp.dir, err)
	}
	if cp.caPEM, err = os.ReadFile(keys.caFile); err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	if cp.identities, err = newIdentities(); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(cp.dir, "tokens.csv")
	if err := writeTokenFile(tokenFile, cp.identities); err != nil {
		return nil, err
	}
	var ports []int
	if err := cp.inNetNS(func() (err error) { ports, err = freePorts(3); return err }); err != nil {
		return nil, err
	}
	loopback := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	cp.etcdURL = "http://" + hostPort(loopback, ports[0])
	peerURL := "http://" + hostPort(loopback, ports[1])
	cp.url = "https://" + hostPort(addr, ports[2])
	deadline, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	cp.etcd, err = startProcess(ctx, opts.NetNS, "etcd", bins.Etcd, filepath.Join(cp.dir, "etcd.log"),
		"--name", "default",
		"--data-dir", filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls", cp.etcdURL,
		"--advertise-client-urls", cp.etcdURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync",
	)
	if err != nil {
		return nil, err
	}
	etcdClient := &http.Client{Transport: &http.Transport{DialContext: cp.dialer()}}
	defer etcdClient.CloseIdleConnections()
	if err := waitHealthy(deadline, cp.etcd, etcdClient, cp.etcdURL+"/health", ""); err != nil {
		return nil, err
	}

	args := []string{
		"--etcd-servers", cp.etcdURL,
		"--bind-address", addr.String(),
		"--advertise-address", addr.String(),
		"--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(cp.dir, "certs"),
		"--tls-cert-file", keys.certFile,
		"--tls-private-key-file", keys.keyFile,
		"--token-auth-file", tokenFile,
		"--anonymous-auth=false",
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", keys.saKeyFile,
		"--service-account-signing-key-file", keys.saKeyFile,
		"--service-cluster-ip-range", ServiceClusterIPRange,
		"--disable-admission-plugins", "ServiceAccount",
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
	}
	cp.apiserver, err = startProcess(ctx, opts.NetNS, "kube-apiserver", bins.APIServer,
		filepath.Join(cp.dir, "kube-apiserver.log"), append(args, opts.APIServerFlags...)...)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: cp.dialer()}}
	defer client.CloseIdleConnections()
	if err := waitHealthy(deadline, cp.apiserver, client, cp.url+"/readyz", cp.token(AdminUser)); err != nil {
		return nil, err
	}
	cp.startup = time.Since(began)
	return cp, nil
}

// waitHealthy polls url until it answers 200, p exits, or ctx is done.
func waitHealthy(ctx context.Context, p *process, client *http.Client, url, token string) error {
	var last string
	for {
		if err := p.exitError(); err != nil {
			if strings.Contains(err.Error(), "address already in use") {
				return portTakenError{err: err}
			}
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", p.name, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s (last: %s): %w; end of %s:\n%s",
				p.name, url, last, ctx.Err(), p.logPath, p.tail(30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop kills the apiserver and etcd and removes the directory (unless Options.KeepDir). It is
// safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() {
		if cp.apiserver != nil {
			cp.apiserver.kill()
		}
		if cp.etcd != nil {
			cp.etcd.kill()
		}
		if !cp.keepDir && cp.dir != "" {
			if err := os.RemoveAll(cp.dir); err != nil {
				cp.stopErr = fmt.Errorf("remove control plane directory: %w", err)
			}
		}
	})
	return cp.stopErr
}

// Pause stops the apiserver process (SIGSTOP): an outage as its clients see a hung or
// partitioned apiserver (connections made, nothing answered, watches silent). Resume ends it.
func (cp *ControlPlane) Pause() error { return cp.signalAPIServer(syscall.SIGSTOP) }

// Resume continues the apiserver after Pause (SIGCONT).
func (cp *ControlPlane) Resume() error { return cp.signalAPIServer(syscall.SIGCONT) }

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	if cp.apiserver == nil || cp.apiserver.cmd.Process == nil {
		return errors.New("kubetest: the apiserver is not running")
	}
	if err := cp.apiserver.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("kubetest: signal the apiserver (%v): %w", sig, err)
	}
	return nil
}

// URL returns the apiserver's address, https://127.0.0.1:port (or Options.Address).
func (cp *ControlPlane) URL() string { return cp.url }

// EtcdURL returns etcd's client address, http://127.0.0.1:port (in Options.NetNS).
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL }

// Dir returns the directory holding the control plane's files and logs.
func (cp *ControlPlane) Dir() string { return cp.dir }

// StartupTime returns how long Start took to get a ready apiserver, not counting a build.
func (cp *ControlPlane) StartupTime() time.Duration { return cp.startup }

// Identities returns the users registered in the token file, tokens included.
func (cp *ControlPlane) Identities() []Identity {
	out := make([]Identity, len(cp.identities))
	copy(out, cp.identities)
	return out
}

// token returns the bearer token registered for user, or "".
func (cp *ControlPlane) token(user string) string {
	for _, id := range cp.identities {
		if id.User == user {
			return id.Token
		}
	}
	return ""
}

// logTails returns the end of both logs, for a failed test.
func (cp *ControlPlane) logTails(n int) string {
	var b strings.Builder
	for _, p := range []*process{cp.etcd, cp.apiserver} {
		if p != nil {
			fmt.Fprintf(&b, "--- end of %s:\n%s\n", p.logPath, p.tail(n))
		}
	}
	return b.String()
}
