package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube"
	"github.com/xlb-dev/xlb/lb/reconcile"
	"github.com/xlb-dev/xlb/xdp/datapath"
	"github.com/xlb-dev/xlb/xdp/socklb"
)

// agentOptions are the flags of `xlb agent`.
type agentOptions struct {
	node       string // the node's name
	kubeconfig string // "" = in-cluster
	cgroup     string // "" = the cgroup v2 root
	listen     string // address of /metrics and /healthz; "" = none
	pinPath    string // bpffs directory of the pins; "" = nothing pinned
	cleanup    bool   // detach and unpin at exit
	netnsDir   string // where Pods' network namespaces are pinned ("" = the agent's own only)
	sockets    int    // size of the socket load balancer's LRU maps (socklb.Options.Sockets)
}

// DefaultAgentListen is where `xlb agent` serves /metrics and /healthz unless told otherwise.
const DefaultAgentListen = "127.0.0.1:9612"

// runAgent runs the node agent until ctx ends: the socket load balancer attached to the node's
// cgroup, fed with every Service's cluster IPs. With a pin path the programs stay attached when
// it returns (cluster IPs stay balanced as last applied, and the next agent adopts the pins),
// unless opts.cleanup; without one they are detached.
func runAgent(ctx context.Context, opts agentOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if opts.node == "" {
		opts.node = os.Getenv("NODE_NAME")
	}
	if opts.node == "" {
		return errors.New("agent: no node name: pass --node or set NODE_NAME (from the Pod's spec.nodeName)")
	}
	cfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	if opts.pinPath == "" && socklb.HasPins(socklb.DefaultPinPath) {
		// Those programs would keep balancing from frozen maps, ahead of ours.
		return fmt.Errorf("agent: an earlier agent's programs are still pinned in %s: remove them with xlb cleanup --pin-path %s, or run with that pin path",
			socklb.DefaultPinPath, socklb.DefaultPinPath)
	}
	dp, err := socklb.Load(socklb.Options{Cgroup: opts.cgroup, PinPath: opts.pinPath, Sockets: opts.sockets})
	if err != nil {
		return err
	}
	if r := dp.Replaced(); r != nil {
		log.Warn("replaced the pinned socket load balancer instead of adopting it", "pin_path", opts.pinPath, "reason", r)
	}
	if n := dp.Frontends(); n > 0 {
		log.Info("adopted the pinned socket load balancer", "pin_path", opts.pinPath, "frontends", n)
	}
	if err := dp.ReapUDPErr(); err != nil {
		log.Warn("connected UDP sockets will keep a removed endpoint until their application closes them", "err", err)
	}
	defer func() {
		if opts.cleanup || opts.pinPath == "" {
			if err := dp.Remove(); err != nil {
				log.Error("detaching the socket load balancer", "err", err)
			}
			log.Info("node agent stopped: cluster IPs are no longer balanced on this node")
			return
		}
		if err := dp.Close(); err != nil {
			log.Error("closing the socket load balancer", "err", err)
		}
		log.Info("node agent stopped: cluster IPs stay balanced as last applied", "pin_path", opts.pinPath)
	}()
	rec, err := reconcile.NewConnect(dp, log)
	if err != nil {
		return err
	}
	var (
		mu       sync.Mutex // guards dp against /metrics
		applied  atomic.Bool
		lastErrs string
		reaped   atomic.Uint64 // connected UDP sockets closed
	)
	agent, err := kube.NewAgent(client, kube.AgentOptions{
		Node: opts.node,
		Log:  log,
		Apply: func(models []lb.Service) error {
			plan, errs := lb.PlanConnect(models)
			if msg := joinErrors(errs); msg != lastErrs {
				lastErrs = msg
				for _, e := range errs {
					log.Warn("service not balanced", "err", e)
				}
			}
			mu.Lock()
			ch, err := rec.Apply(plan)
			frontends := rec.Frontends()
			mu.Unlock()
			if ch.Added+ch.Updated+ch.Removed > 0 {
				log.Info("cluster IPs applied", "frontends", frontends, "added", ch.Added, "updated", ch.Updated, "removed", ch.Removed)
			}
			if ch.UDPLost > 0 {
				// Endpoints left UDP frontends: their connected sockets go.
				reaped.Add(uint64(reapUDP(log, dp, opts.netnsDir)))
			}
			// Healthy once applied, even with frontends that could not be written (they are
			// retried, and the rest serve): a liveness probe restarting the agent for a bad
			// Service would help nobody.
			applied.Store(true)
			return err
		},
	})
	if err != nil {
		return err
	}
	if opts.listen != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(&agentCollector{dp: dp, rec: rec, mu: &mu, reaped: &reaped})
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if !applied.Load() {
				http.Error(w, "cluster IPs not applied yet", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		ln, err := net.Listen("tcp", opts.listen)
		if err != nil {
			return fmt.Errorf("agent: listen on %s: %w", opts.listen, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	}
	log.Info("node agent started", "node", opts.node)
	return agent.Run(ctx)
}

// joinErrors is the errors' texts, one per line.
func joinErrors(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

// reapUDP closes, in the agent's network namespace and the Pods' pinned in netnsDir, the
// connected UDP sockets whose endpoint no longer serves their frontend, logs them and returns
// how many it closed. Failures are logged: balancing goes on without it.
func reapUDP(log *slog.Logger, dp datapath.SocketLB, netnsDir string) int {
	reaped, err := dp.CloseLostUDP(netnsDir)
	if errors.Is(err, datapath.ErrUnsupported) && len(reaped) == 0 {
		return 0 // said once at start
	}
	if err != nil {
		log.Warn("closing connected UDP sockets of removed endpoints", "err", err)
	}
	closed := 0
	for _, r := range reaped {
		if r.Err != nil {
			log.Warn("could not close a connected UDP socket of a removed endpoint", "netns", r.Netns, "endpoint", r.Endpoint, "frontend", r.Frontend, "err", r.Err)
			continue
		}
		closed++
		log.Info("closed a connected UDP socket: its endpoint left the frontend", "netns", r.Netns, "endpoint", r.Endpoint, "frontend", r.Frontend)
	}
	return closed
}

// agentCollector exports the socket load balancer's counters.
type agentCollector struct {
	dp     datapath.SocketLB
	rec    *reconcile.ConnectReconciler
	mu     *sync.Mutex
	reaped *atomic.Uint64
}

var (
	agentFrontends = prometheus.NewDesc("xlb_agent_frontends", "Cluster IP frontends (address, port, protocol) balanced on this node.", nil, nil)
	agentEvents    = prometheus.NewDesc("xlb_agent_socket_events_total", "Socket calls the programs acted on: connect (sent to an endpoint), refused (no endpoint serves), datagram (unconnected UDP sent to an endpoint), datagram_kept (of those, to the socket's earlier endpoint), revnat (cluster IP given back by recvmsg or getpeername), affinity_kept (a connection sent to its client's endpoint, sessionAffinity: ClientIP), no_slot (never, unless a map write failed), udp_closed (a connected UDP socket closed by the agent: its endpoint left the frontend).", []string{"event"}, nil)
	agentErrors    = prometheus.NewDesc("xlb_agent_scrape_errors", "Counters that could not be read during this scrape.", nil, nil)
)

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentFrontends
	ch <- agentEvents
	ch <- agentErrors
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	n := c.rec.Frontends()
	cnt, err := c.dp.Counters()
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(agentFrontends, prometheus.GaugeValue, float64(n))
	errs := 0
	if err != nil {
		errs = 1
	} else {
		for ev, v := range map[string]uint64{"connect": cnt.Connects, "refused": cnt.Refused, "datagram": cnt.Datagrams,
			"datagram_kept": cnt.DatagramsKept, "revnat": cnt.Revnat, "affinity_kept": cnt.AffinityKept, "no_slot": cnt.NoSlot,
			"udp_closed": c.reaped.Load()} {
			ch <- prometheus.MustNewConstMetric(agentEvents, prometheus.CounterValue, float64(v), ev)
		}
	}
	ch <- prometheus.MustNewConstMetric(agentErrors, prometheus.GaugeValue, float64(errs))
}
