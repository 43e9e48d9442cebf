// SPDX-License-Identifier: Apache-2.0
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/maglev"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// The fields of each mapping of the file, in the order the documentation gives them.
var (
	topFields       = []string{"interfaces", "datapath", "listen", "log", "services", "bgp", "l2", "pools", "kubernetes"}
	interfaceFields = []string{"name", "mode", "role"}
	datapathFields  = []string{"kind", "pinPath", "conntrackSize", "handshakeSize", "maglevSlots", "maglevTableSize", "seed",
		"tcpEstablishedTimeout", "tcpClosingTimeout", "udpTimeout", "newFlowRate", "nextHopCacheTTL", "backendWarmup", "forwarding", "dsrFallback",
		"clusterPrefixes"}
	logFields     = []string{"format", "level"}
	serviceFields = []string{"name", "vips", "ports", "backends", "sessionAffinity", "sessionAffinityTimeout",
		"sourceRanges", "externalTrafficPolicy", "maglevTableSize", "healthCheck", "bgp"}
	portFields        = []string{"name", "port", "protocol", "targetPort"}
	backendFields     = []string{"address", "weight", "state", "node", "targetPorts", "dsr"}
	healthCheckFields = []string{"type", "port", "path", "expectStatus", "payload", "expect", "interval",
		"timeout", "rise", "fall"}
	bgpFields = []string{"routerID", "asn", "listenPort", "gracefulRestart", "minHealthyBackends", "withdrawOnExit",
		"communities", "largeCommunities", "localPref", "med", "peers"}
	bgpPeerFields = []string{"address", "asn", "port", "passwordFile", "multihopTTL", "holdTime", "keepaliveTime",
		"connectRetry", "passive", "localAddress", "bfd"}
	bfdFields = []string{"enabled", "transmitInterval", "receiveInterval", "multiplier", "holdDown"}
)

// Load reads and parses the config file at path; errors name the file by path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a config file's contents; name is the file's name, for errors. It returns
// every problem it finds (up to 20), each an *Error that names the file, the line and the
// field path, joined with errors.Join and sorted by line.
func Parse(name string, data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errEmpty(name)
		}
		return nil, syntaxError(name, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{File: name, Line: next.Line, Err: errors.New("a second YAML document (after ---); a config file holds one")}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(name, data, err)
	}
	if len(doc.Content) == 0 || isNull(resolve(doc.Content[0])) {
		return nil, errEmpty(name)
	}
	d := &decoder{file: name}
	cfg := d.config(doc.Content[0])
	if len(d.errs) > 0 {
		return nil, joinErrors(name, d.errs)
	}
	return cfg, nil
}

func errEmpty(name string) error {
	return &Error{File: name, Err: errors.New("the file is empty (a config needs at least interfaces; see deploy/xlb.example.yaml)")}
}

// config walks the document's root.
func (d *decoder) config(root *yaml.Node) *Config {
	cfg := &Config{
		Listen:       DefaultListen,
		Log:          Log{Format: LogText, Level: slog.LevelInfo},
		HealthChecks: map[string]HealthCheck{},
	}
	o, ok := d.object(root, "", topFields)
	if !ok {
		return nil
	}
	if n := d.required(o, "interfaces", "list at least one interface to attach to"); n != nil {
		cfg.Interfaces = d.interfaces(n, "interfaces")
	}
	cfg.Datapath.Kind = DatapathXDP
	if n := o.get("datapath"); n != nil {
		cfg.Datapath = d.datapath(n, "datapath")
	}
	if n := o.get("listen"); n != nil {
		if s, ok := d.str(n, "listen"); ok {
			if err := checkListen(s); err != nil {
				d.fail(n, "listen", err)
			}
			cfg.Listen = s
		}
	}
	if n := o.get("log"); n != nil {
		d.log(n, "log", &cfg.Log)
	}
	if n := o.get("services"); n != nil {
		d.services(n, "services", cfg)
	}
	if n := o.get("bgp"); n != nil {
		cfg.BGP = d.bgp(n, "bgp", o.get("kubernetes") != nil)
	}
	if n := o.get("l2"); n != nil {
		cfg.L2 = d.l2(n, "l2", cfg.Interfaces)
	}
	d.poolsAndKubernetes(o, cfg)
	return cfg
}

func (d *decoder) interfaces(n *yaml.Node, path string) []Interface {
	items, ok := d.list(n, path)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		d.failf(n, path, "empty (list at least one interface to attach to)")
	}
	var out []Interface
	names := map[string]place{}
	for i, item := range items {
		o, ok := d.object(item, index(path, i), interfaceFields)
		if !ok {
			continue
		}
		ifc := Interface{Mode: datapath.AttachAuto}
		if v := d.required(o, "name", "required"); v != nil {
			if s, ok := d.str(v, o.at("name")); ok {
				if err := checkIfName(s); err != nil {
					d.fail(v, o.at("name"), err)
				} else if first, dup := names[s]; dup {
					d.fail(v, o.at("name"), errDuplicate(strconv.Quote(s), first))
				} else {
					names[s] = place{o.path, v.Line}
				}
				ifc.Name = s
			}
		}
		if v := o.get("mode"); v != nil {
			if s, ok := d.enum(v, o.at("mode"), "mode", string(datapath.AttachAuto), string(datapath.AttachNative), string(datapath.AttachGeneric)); ok {
				ifc.Mode = datapath.AttachMode(s)
			}
		}
		// No default: a guessed side is either a reflector (replies reverse-NATed from the
		// internet) or an outage (replies dropped). An older config, which had no roles, fails
		// here with the fix in the message.
		if v := d.required(o, "role", "required: the side this interface faces: client (upstream routers), cluster (nodes and Pods) or both (a one-armed gateway; see docs/datapath.md, \"Security model\")"); v != nil {
			if s, ok := d.enum(v, o.at("role"), "role", "client", "cluster", "both"); ok {
				ifc.Role, _ = datapath.ParseRole(s)
			}
		}
		out = append(out, ifc)
	}
	return out
}

// checkIfName applies the kernel's rules for interface names (dev_valid_name).
func checkIfName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > 15:
		return fmt.Errorf("%q is longer than 15 bytes, the longest interface name", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not a valid interface name", s)
	case strings.ContainsAny(s, "/: \t\n\v\f\r"):
		return fmt.Errorf("%q is not a valid interface name (no '/', ':' or white space)", s)
	}
	return nil
}

func (d *decoder) datapath(n *yaml.Node, path string) Datapath {
	var dp Datapath
	o, ok := d.object(n, path, datapathFields)
	if !ok {
		return dp
	}
	dp.Kind = DatapathXDP
	if v := o.get("kind"); v != nil {
		if s, ok := d.enum(v, o.at("kind"), "kind", string(DatapathXDP), string(DatapathAFXDP)); ok {
			dp.Kind = DatapathKind(s)
		}
	}
	if v := o.get("pinPath"); v != nil {
		if s, ok := d.nonEmpty(v, o.at("pinPath")); ok {
			if !filepath.IsAbs(s) {
				d.failf(v, o.at("pinPath"), "%q is not an absolute path", s)
			}
			dp.PinPath = filepath.Clean(s)
		}
	}
	for _, f := range []struct {
		key string
		dst *uint32
	}{{"conntrackSize", &dp.ConntrackSize}, {"handshakeSize", &dp.HandshakeSize}, {"maglevSlots", &dp.MaglevSlots}, {"seed", &dp.Seed}} {
		if v := o.get(f.key); v != nil {
			*f.dst, _ = d.uint32Of(v, o.at(f.key))
		}
	}
	if v := o.get("maglevTableSize"); v != nil {
		dp.MaglevTableSize = d.tableSize(v, o.at("maglevTableSize"))
	}
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"tcpEstablishedTimeout", &dp.TCPEstablishedTimeout}, {"tcpClosingTimeout", &dp.TCPClosingTimeout},
		{"udpTimeout", &dp.UDPTimeout}} {
		v := o.get(f.key)
		if v == nil {
			continue
		}
		t, ok := d.duration(v, o.at(f.key))
		switch {
		case !ok:
		case t < 0:
			d.failf(v, o.at(f.key), "%s is negative", t)
		case t > 0 && t < datapath.MinTimeout:
			d.failf(v, o.at(f.key), "%s is below the %s minimum (conntrack timestamps are refreshed once a second)", t, datapath.MinTimeout)
		default:
			*f.dst = t
		}
	}
	if v := o.get("newFlowRate"); v != nil {
		if r, ok := d.integer(v, o.at("newFlowRate"), -1, math.MaxInt64); ok {
			dp.NewFlowRate = r
		}
	}
	if v := o.get("nextHopCacheTTL"); v != nil {
		if s := resolve(v); s.Kind == yaml.ScalarNode && s.ShortTag() == "!!str" && s.Value == "off" {
			dp.NextHopCacheTTL = -1
		} else if t, ok := d.duration(v, o.at("nextHopCacheTTL")); ok {
			if t < 0 {
				d.failf(v, o.at("nextHopCacheTTL"), "%s is negative (write off to disable the cache)", t)
			}
			dp.NextHopCacheTTL = t
		}
	}
	if v := o.get("backendWarmup"); v != nil {
		if s := resolve(v); s.Kind == yaml.ScalarNode && s.ShortTag() == "!!str" && s.Value == "off" {
			dp.BackendWarmup = -1
		} else if t, ok := d.duration(v, o.at("backendWarmup")); ok {
			switch {
			case t < 0:
				d.failf(v, o.at("backendWarmup"), "%s is negative (write off for no warm-up)", t)
			case t > time.Minute:
				d.failf(v, o.at("backendWarmup"), "%s is over the 1m maximum (a scale-up would wait that long)", t)
			default:
				dp.BackendWarmup = t
			}
		}
	}
	if v := o.get("forwarding"); v != nil {
		if s, ok := d.enum(v, o.at("forwarding"), "forwarding", string(datapath.ReturnPath), string(datapath.DSR)); ok {
			dp.Forwarding.Mode = datapath.Forwarding(s)
		}
	}
	if v := o.get("clusterPrefixes"); v != nil {
		if items, ok := d.list(v, o.at("clusterPrefixes")); ok {
			dp.ClusterPrefixes = uniqueItems(d, items, o.at("clusterPrefixes"), d.prefix)
		}
	}
	if v := o.get("dsrFallback"); v != nil {
		if s, ok := d.enum(v, o.at("dsrFallback"), "dsrFallback", lb.FallbackExclude.String(), lb.FallbackReturnPath.String()); ok {
			dp.Forwarding.Fallback, _ = lb.ParseFallback(s)
			if dp.Forwarding.Mode != datapath.DSR {
				d.failf(v, o.at("dsrFallback"), "only applies with forwarding: dsr")
			}
		}
	}
	return dp
}

// hostName matches a DNS name, for the host of listen.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)

// checkListen checks a host:port for the HTTP server.
func checkListen(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port (want e.g. 127.0.0.1:9610, [::1]:9610 or :9610)", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	if host == "" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.IsMulticast() {
			return fmt.Errorf("%q: %s is a multicast address", s, a)
		}
		return nil
	}
	if !hostName.MatchString(host) {
		return fmt.Errorf("%q: %q is neither an IP address nor a host name", s, host)
	}
	return nil
}

func (d *decoder) log(n *yaml.Node, path string, l *Log) {
	o, ok := d.object(n, path, logFields)
	if !ok {
		return
	}
	if v := o.get("format"); v != nil {
		if s, ok := d.enum(v, o.at("format"), "format", string(LogText), string(LogJSON)); ok {
			l.Format = LogFormat(s)
		}
	}
	if v := o.get("level"); v != nil {
		levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo,
			"warn": slog.LevelWarn, "error": slog.LevelError}
		if s, ok := d.enum(v, o.at("level"), "level", "debug", "info", "warn", "error"); ok {
			l.Level = levels[s]
		}
	}
}

// tableSize reads a Maglev table size: a prime the table builder accepts.
func (d *decoder) tableSize(v *yaml.Node, path string) int {
	n, ok := d.uint32Of(v, path)
	if !ok {
		return 0
	}
	if err := maglev.CheckSize(int(n)); err != nil {
		d.failf(v, path, "%d is not a usable Maglev table size: a prime from 2 to %d, such as %d (%s)",
			n, maglev.MaxSize, lb.DefaultTableSize, strings.TrimPrefix(err.Error(), "maglev: "))
		return 0
	}
	return int(n)
}
