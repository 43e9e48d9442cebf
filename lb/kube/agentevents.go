// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// agentEventReasons are the node agent's problems that become Events on the Service: what of it
// the agent refuses to balance. The agent's other problems are logged only (the gateways'
// controller records those of its LoadBalancer Services).
var agentEventReasons = []string{ReasonExternalIPRefused, ReasonLoadBalancerIPRefused, ReasonFrontendConflict}

const (
	// agentEventComponent is the source of the node agent's Events.
	agentEventComponent = "xlb-agent"
	// agentEventQueue bounds the Events waiting to be created; beyond it they are dropped (and
	// recorded at a later pass).
	agentEventQueue = 256
	// agentEventTimeout bounds one Event's creation.
	agentEventTimeout = 10 * time.Second
	// maxEventMessage is the longest message an Event gets (the apiserver refuses longer).
	maxEventMessage = 1024
)

// serviceEvents records the node agent's Warning Events on Services. Every node's agent sees the
// same Services and finds the same problems, so an Event's name is derived from the Service's
// UID, the reason and the message: the first agent creates it and the others find it there
// (one Event per problem in the cluster, not one per node). Each agent records a problem once,
// until its message changes, or it goes and comes back. Events are created by a goroutine of
// their own (run): a slow apiserver never holds up balancing.
type serviceEvents struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger
	queue  chan *corev1.Event

	mu sync.Mutex
	// recorded: Service key (namespace/name) → reason → the message recorded (or queued).
	recorded map[string]map[string]string
}

func newServiceEvents(client kubernetes.Interface, node string, log *slog.Logger) *serviceEvents {
	return &serviceEvents{client: client, node: node, log: log, queue: make(chan *corev1.Event, agentEventQueue),
		recorded: map[string]map[string]string{}}
}

// report records svc's problems of agentEventReasons not recorded yet, one Event per reason
// (the messages of one reason joined), and forgets those it no longer has.
func (e *serviceEvents) report(svc *corev1.Service, problems []Problem) {
	key := svc.Namespace + "/" + svc.Name
	now := map[string]string{}
	for _, p := range problems {
		if !slices.Contains(agentEventReasons, p.Reason) {
			continue
		}
		if m, ok := now[p.Reason]; ok {
			now[p.Reason] = m + "; " + p.Message
		} else {
			now[p.Reason] = p.Message
		}
	}
	for r, m := range now {
		if len(m) > maxEventMessage {
			now[r] = strings.ToValidUTF8(m[:maxEventMessage-len("…")], "") + "…"
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(now) == 0 {
		delete(e.recorded, key)
		return
	}
	had := e.recorded[key]
	for reason, msg := range now {
		if had[reason] == msg {
			continue
		}
		select {
		case e.queue <- e.event(svc, reason, msg):
		default:
			e.log.Warn("too many Events waiting: one dropped (recorded at a later pass)", "service", key, "reason", reason)
			delete(now, reason)
		}
	}
	e.recorded[key] = now
}

// forget drops what was recorded of the Services not in seen (deleted: a Service made again
// under the same name is reported afresh).
func (e *serviceEvents) forget(seen map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.recorded {
		if !seen[k] {
			delete(e.recorded, k)
		}
	}
}

// event is the Warning Event of reason on svc (msg at most maxEventMessage bytes), named for the problem (see serviceEvents).
func (e *serviceEvents) event(svc *corev1.Service, reason, msg string) *corev1.Event {
	h := sha256.Sum256([]byte(string(svc.UID) + "\x00" + reason + "\x00" + msg))
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + ".xlb-" + hex.EncodeToString(h[:8]), Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name,
			UID: svc.UID, ResourceVersion: svc.ResourceVersion},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: agentEventComponent},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "xlb.dev/agent", ReportingInstance: e.node,
	}
}

// run creates the queued Events until ctx ends. One that another agent created already is
// left as it is; one that cannot be created is logged and forgotten, so that a later pass
// records it again.
func (e *serviceEvents) run(ctx context.Context) {
	for {
		var ev *corev1.Event
		select {
		case <-ctx.Done():
			return
		case ev = <-e.queue:
		}
		cctx, cancel := context.WithTimeout(ctx, agentEventTimeout)
		_, err := e.client.CoreV1().Events(ev.Namespace).Create(cctx, ev, metav1.CreateOptions{})
		cancel()
		key := ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
		switch {
		case err == nil:
			e.log.Debug("event recorded", "service", key, "reason", ev.Reason, "event", ev.Name)
		case apierrors.IsAlreadyExists(err):
			// Another node's agent recorded the same problem.
		case ctx.Err() != nil:
			return
		default:
			e.log.Warn("could not record an Event on a service (retried at a later pass)", "service", key, "reason", ev.Reason, "err", err)
			e.mu.Lock()
			if e.recorded[key][ev.Reason] == ev.Message {
				delete(e.recorded[key], ev.Reason)
			}
			e.mu.Unlock()
		}
	}
}
