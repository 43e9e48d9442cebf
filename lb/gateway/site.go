// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/config"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
	"github.com/xlb-dev/xlb/xdp/datapath"
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
// cfg; the state goes to the gateway once it exists. When neither the object nor the file sets
// a seed, it writes one into the object first (siteSeed).
func startSite(cfg *config.Config, log *slog.Logger, running func(*config.Config) (uint32, bool)) siteState {
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
	if site.Seed == nil && cfg.Datapath.Seed == 0 {
		// A seed that cannot be written leaves the object as read (siteSeed says why): the
		// gateway runs with seed 0, as its peers that cannot write either.
		if withSeed, err := siteSeed(ctx, client, cfg, log, running); err == nil {
			site = withSeed
		}
	}
	overlaySite(cfg, site, log)
	if site.Generation != 0 {
		log.Info("datapath settings from SiteSettings site", "generation", site.Generation, "seed", cfg.Datapath.Seed,
			"forwarding", cfg.Datapath.Forwarding.Mode)
	}
	return siteState{site: site, read: true}
}

// siteSeed writes a seed into SiteSettings site, which sets none while the file sets none either,
// and returns the object as it then is: the seed of the datapath already forwarding on this host
// (running), so that a site upgraded from a build whose chart set the seed in the file keeps it
// and its gateways never disagree during the roll, else a random one. Every gateway starting so
// proposes its own, and all get the first written (kube.EnsureSeed). If it cannot be written, the
// gateway runs without (seed 0): a random seed of its own would send the flows ECMP moves to it
// elsewhere than the other gateways do.
func siteSeed(ctx context.Context, client dynamic.Interface, cfg *config.Config, log *slog.Logger,
	running func(*config.Config) (uint32, bool)) (kube.Site, error) {
	candidate, from := uint32(0), "random"
	if running != nil {
		if s, ok := running(cfg); ok {
			candidate, from = s, "the running datapath's"
		}
	}
	if from == "random" {
		var b [4]byte
		for candidate == 0 || datapath.PublishedSeed(candidate) {
			if _, err := rand.Read(b[:]); err != nil {
				return kube.Site{}, fmt.Errorf("sitesettings: a random seed: %w", err)
			}
			candidate = binary.LittleEndian.Uint32(b[:])
		}
	}
	seed, written, err := kube.EnsureSeed(ctx, client, candidate)
	if err != nil {
		log.Warn("no seed in SiteSettings site nor in the file, and none could be written there: the datapath starts with seed 0 (a published default)",
			"error", err)
		return kube.Site{}, err
	}
	if written {
		log.Info("wrote the site's flow-hash seed into SiteSettings site (every gateway of the site reads it)", "seed", from)
	}
	site, err := readSite(ctx, client)
	if err == nil && (site.Seed == nil || *site.Seed != seed) {
		err = fmt.Errorf("sitesettings %s: its seed changed while it was written", v1alpha1.SiteSettingsName)
	}
	if err != nil {
		log.Warn("SiteSettings site not read back after its seed was written: the datapath starts with seed 0; the gateway reports the site's seed as pending a restart",
			"error", err)
		return kube.Site{}, err
	}
	return site, nil
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
	out := &v1alpha1.SiteStatus{ObservedGeneration: st.site.Generation, Seed: int64(g.planOpts.Seed),
		SeedPublished: datapath.PublishedSeed(g.planOpts.Seed)}
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
