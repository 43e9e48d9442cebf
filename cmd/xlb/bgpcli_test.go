// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBGPCLIFormat: `xlb bgp` prints every session (address, ASN, state, uptime, BFD state and
// transitions, prefixes sent and received, last error) and every announced route with its attributes, from the
// daemon's /bgp JSON; `--json` prints the JSON as served; a daemon without BGP and a daemon
// that is not there are reported as such.
func TestBGPCLIFormat(t *testing.T) {
	doc := `{"enabled": true, "routerID": "198.18.2.2", "asn": 65001,
	 "peers": [
	  {"address": "198.18.2.1", "asn": 65000, "state": "established", "uptimeSeconds": 75, "prefixesSent": 1, "prefixesReceived": 0, "updatesSent": 3, "bfd": "up", "bfdTransitions": 3},
	  {"address": "198.18.3.1", "asn": 65003, "state": "active", "lastError": "connect: dial tcp 198.18.3.1:179: i/o timeout"}],
	 "routes": [{"prefix": "198.18.100.1/32", "communities": ["65000:100", "65000:200"], "largeCommunities": ["65000:1:2"], "med": 7}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bgp":
			w.Write([]byte(doc))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	var out, errb bytes.Buffer
	if code := bgpCLI([]string{"--listen", addr}, &out, &errb); code != 0 {
		t.Fatalf("xlb bgp: exit %d: %s", code, errb.String())
	}
	t.Logf("xlb bgp:\n%s", out.String())
	for _, want := range []string{
		"router ID 198.18.2.2, AS 65001",
		"198.18.2.1  65000  established  1m15s   up (3)  1     0",
		"198.18.3.1  65003  active       -       -       0     0         connect: dial tcp 198.18.3.1:179: i/o timeout",
		"1 announced prefix(es)",
		"198.18.100.1/32  65000:100 65000:200  65000:1:2          -           7",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	out.Reset()
	if code := bgpCLI([]string{"--listen", addr, "--json"}, &out, &errb); code != 0 || out.String() != doc {
		t.Errorf("--json: exit %d, output %q", code, out.String())
	}

	doc = `{"enabled": false, "peers": [], "routes": []}`
	out.Reset()
	if code := bgpCLI([]string{"--listen", addr}, &out, &errb); code != 0 || !strings.Contains(out.String(), "runs no BGP speaker") {
		t.Errorf("no speaker: exit %d, output %q", code, out.String())
	}

	srv.Close()
	out.Reset()
	errb.Reset()
	if code := bgpCLI([]string{"--listen", addr}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "is xlb running") {
		t.Errorf("no daemon: exit %d, stderr %q", code, errb.String())
	}
}
