// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

// syncBuffer is a bytes.Buffer safe for the agent's goroutines and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAgentServiceCIDRFallback: an agent that may not list ServiceCIDRs says so and keeps to
// its --service-cidr: an external IP inside it is refused, counted and reported by one Event,
// however many passes follow.
func TestAgentServiceCIDRFallback(t *testing.T) {
	svc := clusterIPService("evil", "198.18.96.200")
	svc.UID = "uid-evil"
	svc.Spec.ExternalIPs = []string{"198.18.96.10"}
	client := fake.NewClientset(svc)
	client.PrependReactor("list", "servicecidrs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, "", nil)
	})
	var logs syncBuffer
	var mu sync.Mutex
	var last ClusterIPs
	passes := 0
	a, err := NewAgent(client, AgentOptions{
		Node:   "n1",
		Log:    slog.New(slog.NewTextHandler(&logs, nil)),
		Policy: AddressPolicy{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.96.0/24")}, ExternalIPs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}},
		Apply: func(p ClusterIPs) error {
			mu.Lock()
			defer mu.Unlock()
			last, passes = p, passes+1
			return nil
		},
		Debounce: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventsOf := func() []corev1.Event {
		l, err := client.CoreV1().Events("ns").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("an Event", func() bool { return len(eventsOf()) > 0 })
	// More passes: a change to another Service each.
	for i := range 3 {
		other := clusterIPService("other"+string(rune('a'+i)), "198.18.96."+string(rune('1'+i)))
		if _, err := client.CoreV1().Services("ns").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wait("a pass with the new Service", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(last.Services) == 2+i
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := last.Plan[datapath.Frontend{Addr: netip.MustParseAddr("198.18.96.10"), Port: 80, Proto: datapath.TCP}]; ok {
		t.Error("the external IP inside --service-cidr is balanced")
	}
	if last.Refused[ReasonExternalIPRefused] != 1 {
		t.Errorf("refused %v, want one Service with ExternalIPRefused", last.Refused)
	}
	evs := eventsOf()
	if len(evs) != 1 || evs[0].Reason != ReasonExternalIPRefused || evs[0].InvolvedObject.UID != "uid-evil" ||
		!strings.Contains(evs[0].Message, "198.18.96.10 is inside the service CIDR 198.18.96.0/24") {
		t.Errorf("after %d passes, events %+v; want one ExternalIPRefused", passes, evs)
	}
	if l := logs.String(); !strings.Contains(l, "not watching the cluster's ServiceCIDRs") || strings.Count(l, "reason=ExternalIPRefused") != 1 {
		t.Errorf("log:\n%s", l)
	}
}
