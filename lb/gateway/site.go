// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// The SiteSettings object (Kubernetes mode): read at start, before the datapath is loaded, so
// that the seed, table size and timeouts it sets are the ones the datapath runs with; then
// polled, a change applied as a reload (forwarding) or reported as pending a restart.

// siteStartWait bounds the read of SiteSettings at start: a gateway whose apiserver is down
// starts with its file's settings (and says so on its GatewayStatus once it can).
const siteStartWait = 5 * time.Second

// sitePoll is how often a running gateway reads SiteSettings again.
const sitePoll = 10 * time.Second

// siteState is the SiteSettings the gateway uses (under Gateway.mu).
type siteState struct {
	// site is the last valid object's settings (zero: none).
	site kube.Site
	// err is why the last read or check failed, if it did (site is then the previous one).
	err error
	// read says whether the object was read at least once (with or without an object).
	read bool
}

// overlaySite sets cfg's datapath settings from site, where it sets them, and logs the file's
// values it overrides.
func overlaySite(cfg *config.Config, site kube.Site, log *slog.Logger) {
	d := &cfg.Datapath
	if site.Seed != nil {
		if d.Seed != 0 && d.Seed != *site.Seed {
			log.Warn("datapath.seed of the file is overridden by SiteSettings site", "file", d.Seed, "site", *site.Seed)
		}
		d.Seed = *site.Seed
	}
	if site.TableSize != nil {
		d.MaglevTableSize = *site.TableSize
	}
	if site.TCPEstablishedTimeout != nil {
		d.TCPEstablishedTimeout = *site.TCPEstablishedTimeout
	}
	if site.TCPClosingTimeout != nil {
		d.TCPClosingTimeout = *site.TCPClosingTimeout
	}
	if site.UDPTimeout != nil {
		d.UDPTimeout = *site.UDPTimeout
	}
	if site.Forwarding != nil {
		d.Forwarding = *site.Forwarding
	}
}

// readSite reads and checks SiteSettings site.
func readSite(ctx context.Context, client dynamic.Interface) (kube.Site, error) {
	o, err := kube.GetSite(ctx, client)
	if err != nil {
		return kube.Site{}, err
	}
	return kube.SiteOf(o)
}

// startSite reads SiteSettings at start (Kubernetes mode with a kubeconfig) and applies it to
// cfg; the state goes to the gateway once it exists.
func startSite(cfg *config.Config, log *slog.Logger) siteState {
	if cfg.Kubernetes == nil {
		return siteState{}
	}
	rc, err := kube.RestConfig(cfg.Kubernetes.Kubeconfig)
	if err != nil {
		return siteState{err: err}
	}
	rc.Timeout = siteStartWait
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return siteState{err: fmt.Errorf("sitesettings: %w", err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), siteStartWait)
	defer cancel()
	site, err := readSite(ctx, client)
	if err != nil {
		log.Warn("SiteSettings not read at start: the datapath starts with the file's settings", "error", err)
		return siteState{err: err}
	}
	overlaySite(cfg, site, log)
	if site.Generation != 0 {
		log.Info("datapath settings from SiteSettings site", "generation", site.Generation, "seed", cfg.Datapath.Seed,
			"forwarding", cfg.Datapath.Forwarding.Mode)
	}
	return siteState{site: site, read: true}
}

// pollSite reads SiteSettings every sitePoll until ctx ends, and has Run reload when it changed.
func (g *Gateway) pollSite(ctx context.Context, client dynamic.Interface) {
	t := time.NewTicker(sitePoll)
	defer t.Stop()
	for {
		site, err := readSite(ctx, client)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		old := g.site
		next := siteState{site: site, read: true}
		if err != nil {
			next = siteState{site: old.site, err: err, read: old.read}
		}
		changed := fmt.Sprint(next.site, next.err) != fmt.Sprint(old.site, old.err) ||
			site.Generation != old.site.Generation || !old.read
		g.site = next
		g.mu.Unlock()
		if changed {
			if err != nil {
				g.log.Warn("SiteSettings not read; the last settings stay", "error", err)
			}
			select {
			case g.siteChanged <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// siteStatus is the gateway's standing with SiteSettings, for its GatewayStatus: the settings
// the object sets that the running datapath has other values of.
func (g *Gateway) siteStatus() *v1alpha1.SiteStatus {
	g.mu.Lock()
	st, running := g.site, g.started
	g.mu.Unlock()
	out := &v1alpha1.SiteStatus{ObservedGeneration: st.site.Generation, Seed: int64(g.planOpts.Seed)}
	if st.err != nil {
		out.Error = st.err.Error()
	}
	s := st.site
	if s.Seed != nil && *s.Seed != g.planOpts.Seed {
		out.RestartPending = append(out.RestartPending, fmt.Sprintf("seed %d (running %d)", *s.Seed, g.planOpts.Seed))
	}
	runningSize := g.planOpts.TableSize
	if runningSize == 0 {
		runningSize = lb.DefaultTableSize
	}
	if s.TableSize != nil && *s.TableSize != runningSize {
		out.RestartPending = append(out.RestartPending, fmt.Sprintf("maglevTableSize %d (running %d)", *s.TableSize, runningSize))
	}
	for _, t := range []struct {
		name    string
		want    *time.Duration
		running time.Duration
	}{
		{"tcpEstablishedTimeout", s.TCPEstablishedTimeout, running.TCPEstablishedTimeout},
		{"tcpClosingTimeout", s.TCPClosingTimeout, running.TCPClosingTimeout},
		{"udpTimeout", s.UDPTimeout, running.UDPTimeout},
	} {
		if t.want != nil && *t.want != t.running {
			out.RestartPending = append(out.RestartPending, fmt.Sprintf("%s %v (running %v)", t.name, *t.want, t.running))
		}
	}
	return out
}
