// SPDX-License-Identifier: Apache-2.0
package proxyhealth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

var web = types.NamespacedName{Namespace: "shop", Name: "web"}

// listen serves handler-to-be on a fresh 127.0.0.1 listener until the test ends, and returns
// its base URL.
func listen(t *testing.T, serve func(context.Context, net.Listener) error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("serve did not return after its context ended")
		}
	})
	return "http://" + l.Addr().String()
}

// do sends one request and returns its status, headers and body.
func do(t *testing.T, method, url string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

func TestServiceServer(t *testing.T) {
	tests := []struct {
		name      string
		endpoints int
		healthy   bool
		eligible  bool
		method    string
		path      string
		status    int
		weight    string
	}{
		{"endpoints and healthy", 2, true, true, "GET", "/", 200, "2"},
		{"any path and method", 1, true, true, "POST", "/whatever?x=1", 200, "1"},
		{"HEAD", 3, true, true, "HEAD", "/", 200, "3"},
		{"no local endpoint", 0, true, true, "GET", "/", 503, "0"},
		{"negative counts as none", -4, true, true, "GET", "/", 503, "0"},
		{"proxy unhealthy", 2, false, true, "GET", "/", 503, "2"},
		{"eligibility does not matter", 2, true, false, "GET", "/", 200, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{})
			s.SetLocalEndpoints(web, tt.endpoints)
			s.SetLocalEndpoints(types.NamespacedName{Namespace: "shop", Name: "other"}, 7)
			s.SetHealthy(tt.healthy)
			s.SetEligible(tt.eligible)
			url := listen(t, func(ctx context.Context, l net.Listener) error { return s.ServeService(ctx, web, l) })
			status, h, body := do(t, tt.method, url+tt.path)
			if status != tt.status {
				t.Errorf("status %d, want %d", status, tt.status)
			}
			wantHeaders := map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": tt.weight}
			for k, v := range wantHeaders {
				if got := h.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("header %s: %q, want %q", k, got, v)
				}
			}
			if tt.method == "HEAD" {
				return
			}
			n := max(tt.endpoints, 0)
			want := "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": " +
				map[bool]string{true: "", false: ""}[true] + itoa(n) + ",\n\t\"serviceProxyHealthy\": " + map[bool]string{true: "true", false: "false"}[tt.healthy] + "\n}"
			if body != want {
				t.Errorf("body\n%q\nwant\n%q", body, want)
			}
			var parsed struct {
				Service             struct{ Namespace, Name string }
				LocalEndpoints      int
				ServiceProxyHealthy bool
			}
			if err := json.Unmarshal([]byte(body), &parsed); err != nil || parsed.Service.Name != "web" || parsed.LocalEndpoints != n || parsed.ServiceProxyHealthy != tt.healthy {
				t.Errorf("body parses as %+v, %v", parsed, err)
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestNodeServer(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	tests := []struct {
		name         string
		healthy      bool
		eligible     bool
		path         string
		status       int
		wantEligible string // the nodeEligible field as JSON, "" when absent
	}{
		{"healthz healthy", true, true, "/healthz", 200, "true"},
		{"healthz not eligible", true, false, "/healthz", 503, "false"},
		{"healthz unhealthy", false, true, "/healthz", 503, "true"},
		{"livez ignores eligibility", true, false, "/livez", 200, ""},
		{"livez unhealthy", false, true, "/livez", 503, ""},
		{"other paths", true, true, "/", 404, ""},
		{"a path under healthz", true, true, "/healthz/x", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now = start
			s := New(Options{Families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, Now: func() time.Time { return now }})
			now = start.Add(time.Minute)
			s.SetHealthy(tt.healthy)
			s.SetEligible(tt.eligible)
			now = start.Add(2 * time.Minute)
			url := listen(t, s.ServeNode)
			status, h, body := do(t, "GET", url+tt.path)
			if status != tt.status {
				t.Errorf("status %d, want %d (body %q)", status, tt.status, body)
			}
			if tt.status == 404 {
				return
			}
			if h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("headers %v", h)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			// lastUpdated: now when the answer is 200, else the last sync (start when never
			// healthy since New, start+1m after SetHealthy(true)).
			wantLast := `"2026-01-02T03:04:05Z"`
			switch {
			case status == 200:
				wantLast = `"2026-01-02T03:06:05Z"`
			case tt.healthy:
				wantLast = `"2026-01-02T03:05:05Z"`
			}
			proxierLast := `"2026-01-02T03:04:05Z"`
			if tt.healthy {
				proxierLast = `"2026-01-02T03:05:05Z"`
			}
			want := map[string]string{
				"lastUpdated": wantLast,
				"currentTime": `"2026-01-02T03:06:05Z"`,
				"healthy":     map[bool]string{true: "true", false: "false"}[tt.healthy],
				"status": `{"IPv4":{"lastUpdated":` + proxierLast + `,"healthy":` + map[bool]string{true: "true", false: "false"}[tt.healthy] +
					`},"IPv6":{"lastUpdated":` + proxierLast + `,"healthy":` + map[bool]string{true: "true", false: "false"}[tt.healthy] + `}}`,
			}
			if tt.wantEligible != "" {
				want["nodeEligible"] = tt.wantEligible
			}
			if len(got) != len(want) {
				t.Errorf("fields %v, want %v", keys(got), keys(want))
			}
			for k, v := range want {
				if string(got[k]) != v {
					t.Errorf("%s: %s, want %s", k, got[k], v)
				}
			}
			if !strings.HasPrefix(body, `{"lastUpdated":`) {
				t.Errorf("body %q: fields not in kube-proxy's order", body)
			}
		})
	}
}

func keys(m any) []string {
	var out []string
	switch m := m.(type) {
	case map[string]json.RawMessage:
		for k := range m {
			out = append(out, k)
		}
	case map[string]string:
		for k := range m {
			out = append(out, k)
		}
	}
	return out
}

// TestServeStops checks that a server returns when its context ends and that its port is
// closed then.
func TestServeStops(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Options{}).ServeNode(ctx, l) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeNode: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeNode did not return")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections", addr)
	}
	// A listener that fails: the error is returned, naming the address.
	bad, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	err = New(Options{}).ServeService(context.Background(), web, bad)
	if err == nil || !errors.Is(err, net.ErrClosed) || !strings.Contains(err.Error(), bad.Addr().String()) {
		t.Errorf("ServeService on a closed listener: %v", err)
	}
}
