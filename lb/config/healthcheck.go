// SPDX-License-Identifier: Apache-2.0
package config

import (
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlb-dev/xlb/lb"
)

// MinCheckInterval is the shortest health-check interval (the checker's minimum).
const MinCheckInterval = 10 * time.Millisecond

// healthCheck walks a service's healthCheck. ports are the service's, checked against only
// when they had no error (portsOK).

func (d *decoder) healthCheck(n *yaml.Node, path string, ports []lb.Port, portsOK bool) *HealthCheck {
	o, ok := d.object(n, path, healthCheckFields)
	if !ok {
		return nil
	}
	hc := &HealthCheck{Interval: DefaultCheckInterval, Timeout: DefaultCheckTimeout, Rise: DefaultRise, Fall: DefaultFall}

	typeOK := false
	if v := d.required(o, "type", "want tcp, http, https or udp"); v != nil {
		if t, ok := d.enum(v, o.at("type"), "type", string(CheckTCP), string(CheckHTTP), string(CheckHTTPS), string(CheckUDP)); ok {
			hc.Type, typeOK = CheckType(t), true
		}
	}
	// only reports a field set for a type it does not apply to.
	only := func(key string, applies bool, types string) bool {
		if typeOK && !applies {
			d.failf(o.get(key), o.at(key), "only applies to %s checks (this one is %s)", types, hc.Type)
			return false
		}
		return true
	}

	portOK := true
	if v := o.get("port"); v != nil {
		hc.Port, portOK = d.uint16Of(v, o.at("port"), 0)
	}
	if portOK && hc.Port == 0 && portsOK && len(ports) > 0 && ports[0].Port == 0 {
		node := o.node
		if v := o.get("port"); v != nil {
			node = v
		}
		d.failf(node, o.at("port"), "needed: the service's first port serves every port (port 0), so there is no target port to probe")
	}

	if v := o.get("path"); v != nil && only("path", hc.Type.isHTTP(), "http and https") {
		if s, ok := d.str(v, o.at("path")); ok {
			if !strings.HasPrefix(s, "/") {
				d.failf(v, o.at("path"), "%q does not start with /", s)
			}
			hc.Path = s
		}
	}
	if v := o.get("expectStatus"); v != nil && only("expectStatus", hc.Type.isHTTP(), "http and https") {
		s, _ := d.integer(v, o.at("expectStatus"), 100, 599)
		hc.ExpectStatus = int(s)
	}
	if hc.Type.isHTTP() {
		if hc.Path == "" {
			hc.Path = DefaultCheckPath
		}
		if hc.ExpectStatus == 0 {
			hc.ExpectStatus = DefaultExpectStatus
		}
	}
	if v := o.get("payload"); v != nil && only("payload", hc.Type == CheckUDP, "udp") {
		hc.Payload, _ = d.bytesOf(v, o.at("payload"))
	}
	if v := o.get("expect"); v != nil && only("expect", hc.Type == CheckUDP, "udp") {
		hc.Expect, _ = d.bytesOf(v, o.at("expect"))
	}

	intervalOK, timeoutOK := true, true
	if v := o.get("interval"); v != nil {
		t, ok := d.positiveDuration(v, o.at("interval"))
		hc.Interval, intervalOK = t, ok
		if ok && t < MinCheckInterval {
			d.failf(v, o.at("interval"), "%s is below the minimum of %s", t, MinCheckInterval)
			intervalOK = false
		}
	}
	if v := o.get("timeout"); v != nil {
		t, ok := d.positiveDuration(v, o.at("timeout"))
		hc.Timeout, timeoutOK = t, ok
	}
	if intervalOK && timeoutOK && hc.Timeout >= hc.Interval {
		if v := o.get("timeout"); v != nil {
			dflt := ""
			if o.get("interval") == nil {
				dflt = ", the default"
			}
			d.failf(v, o.at("timeout"), "%s is not shorter than the interval (%s%s)", hc.Timeout, hc.Interval, dflt)
		} else {
			d.failf(o.get("interval"), o.at("interval"), "%s is not longer than the timeout (%s, the default)", hc.Interval, hc.Timeout)
		}
	}

	if v := o.get("rise"); v != nil {
		r, _ := d.integer(v, o.at("rise"), 1, math.MaxInt32)
		hc.Rise = int(r)
	}
	if v := o.get("fall"); v != nil {
		f, _ := d.integer(v, o.at("fall"), 1, math.MaxInt32)
		hc.Fall = int(f)
	}
	return hc
}
