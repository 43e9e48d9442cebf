// SPDX-License-Identifier: Apache-2.0
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/xlb-dev/xlb/bgp"
	"github.com/xlb-dev/xlb/lb"
	"github.com/xlb-dev/xlb/lb/kube/api/v1alpha1"
)

// BGPPeer and BGPAdvertisement objects (xlb.dev/v1alpha1): each gateway watches them, peers
// with the BGPPeers that select it, next to the peers of its config file, and adds the
// attributes of the BGPAdvertisements that select it to its routes.

// DefaultPasswordKey is the Secret key of a BGPPeer's password when passwordSecretRef names
// none.
const DefaultPasswordKey = "password"

// peerResync is how often the peers are recomputed even when no BGPPeer changed: a Secret's
// new password or a Node's new labels are picked up within it.
const peerResync = 30 * time.Second

// peerResource is BGPPeer's resource.
func peerResource() schema.GroupVersionResource {
	return v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPPeers)
}

// PeerSourceOptions configure a PeerSource.
type PeerSourceOptions struct {
	// Client reads the gateway's Node (for nodeSelector) and the peers' Secrets.
	Client kubernetes.Interface
	// Dynamic watches the BGPPeer objects.
	Dynamic dynamic.Interface
	// Gateway is this gateway's name (kubernetes.gatewayName), and the name of its Node when
	// it is one.
	Gateway string
	// Namespace is where the peers' Secrets are (the gateways' namespace).
	Namespace string
	// Changed is called, without blocking, when Peers may return something new.
	Changed func()
	// Log receives the source's log; nil discards it.
	Log *slog.Logger
}

// PeerSource follows the BGPPeer objects that select this gateway.
type PeerSource struct {
	opts PeerSourceOptions

	// recorder reports refused objects as Events on them (Run's); reported holds the problems
	// already reported (each once).
	recorder record.EventRecorder
	reported map[string]bool

	mu       sync.Mutex
	informer cache.SharedIndexInformer
	// ads watches the BGPAdvertisements (nil until the API is found).
	ads      cache.SharedIndexInformer
	peers    []bgp.Peer
	attrs    lb.RouteAttributes
	problems []string
}

// NewPeerSource returns a source; Run starts it.
func NewPeerSource(opts PeerSourceOptions) (*PeerSource, error) {
	if opts.Client == nil || opts.Dynamic == nil || opts.Gateway == "" {
		return nil, fmt.Errorf("kube: peer source: client, dynamic client and gateway name are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Changed == nil {
		opts.Changed = func() {}
	}
	return &PeerSource{opts: opts}, nil
}

// Peers returns the peers of the BGPPeer objects that select this gateway, sorted by address,
// the route attributes of the BGPAdvertisements that select it (MergeAdvertisements), and what
// is wrong with the objects that could not be used (one message each).
func (p *PeerSource) Peers() ([]bgp.Peer, lb.RouteAttributes, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.peers), p.attrs, slices.Clone(p.problems)
}

// Run watches the objects until ctx ends. When the API is not served (the CRDs are not
// installed) it looks again every crdRetry.
func (p *PeerSource) Run(ctx context.Context) {
	for {
		ok, err := servesResource(p.opts.Client.Discovery(), v1alpha1.ResourceBGPPeers)
		if err == nil && ok {
			break
		}
		p.opts.Log.Debug("BGPPeer objects not served; looking again later", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(crdRetry):
		}
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.opts.Client.CoreV1().Events("")})
	defer b.Shutdown()
	p.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "xlb", Host: p.opts.Gateway})
	p.reported = map[string]bool{}
	f := dynamicinformer.NewDynamicSharedInformerFactory(p.opts.Dynamic, 0)
	inf := f.ForResource(peerResource()).Informer()
	ads := f.ForResource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.ResourceBGPAdvertisements)).Informer()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	for _, i := range []cache.SharedIndexInformer{inf, ads} {
		_, _ = i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { poke() }, UpdateFunc: func(_, _ any) { poke() }, DeleteFunc: func(any) { poke() },
		})
	}
	p.mu.Lock()
	p.informer, p.ads = inf, ads
	p.mu.Unlock()
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, ads.HasSynced) {
		return
	}
	t := time.NewTicker(peerResync)
	defer t.Stop()
	for {
		p.recompute(ctx)
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
	}
}

// recompute rebuilds the peers from the informer's objects and calls Changed if they changed.
func (p *PeerSource) recompute(ctx context.Context) {
	var objs []v1alpha1.BGPPeer
	for _, o := range p.informer.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var bp v1alpha1.BGPPeer
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &bp); err != nil {
			p.opts.Log.Error("BGPPeer object not readable; ignored", "peer", u.GetName(), "error", err)
			continue
		}
		objs = append(objs, bp)
	}
	var nodeLabels labels.Set
	if n, err := p.opts.Client.CoreV1().Nodes().Get(ctx, p.opts.Gateway, metav1.GetOptions{}); err == nil {
		nodeLabels = n.Labels
	} else if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		p.opts.Log.Warn("gateway's Node not read (BGPPeers' nodeSelector)", "node", p.opts.Gateway, "error", err)
	}
	secret := func(ref *v1alpha1.SecretKeyRef) (string, error) {
		s, err := p.opts.Client.CoreV1().Secrets(p.opts.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("secret %s/%s: %w", p.opts.Namespace, ref.Name, err)
		}
		key := ref.Key
		if key == "" {
			key = DefaultPasswordKey
		}
		v, ok := s.Data[key]
		if !ok {
			return "", fmt.Errorf("secret %s/%s has no key %q", p.opts.Namespace, ref.Name, key)
		}
		return strings.TrimRight(string(v), "\r\n"), nil
	}
	peers, problems := SelectPeers(objs, p.opts.Gateway, nodeLabels, secret)
	var adObjs []v1alpha1.BGPAdvertisement
	for _, o := range p.ads.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var a v1alpha1.BGPAdvertisement
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &a); err != nil {
			p.opts.Log.Error("BGPAdvertisement object not readable; ignored", "advertisement", u.GetName(), "error", err)
			continue
		}
		adObjs = append(adObjs, a)
	}
	attrs, adProblems := MergeAdvertisements(adObjs, p.opts.Gateway, nodeLabels)
	problems = append(problems, adProblems...)
	p.mu.Lock()
	same := slices.Equal(peers, p.peers) && slices.Equal(problems, p.problems) && reflect.DeepEqual(attrs, p.attrs)
	p.peers, p.attrs, p.problems = peers, attrs, problems
	p.mu.Unlock()
	if !same {
		for _, m := range problems {
			p.opts.Log.Warn("BGP object not used", "problem", m)
		}
		p.opts.Changed()
	}
	p.report(problems)
}

// SelectPeers returns the peers of the objects that select gateway (by name, or by the labels
// of its Node, nodeLabels, nil when it is no Node), sorted by address, and a message for each
// selected object that cannot be used: its password Secret unreadable (secret reads one), its
// spec refused by bgp.Peer.Validate, or its address already taken by an older object.
func SelectPeers(objs []v1alpha1.BGPPeer, gateway string, nodeLabels labels.Set,
	secret func(*v1alpha1.SecretKeyRef) (string, error)) ([]bgp.Peer, []string) {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b v1alpha1.BGPPeer) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var peers []bgp.Peer
	var problems []string
	owner := map[netip.Addr]string{}
	for _, o := range objs {
		ok, err := selects(o.Spec.Gateways, o.Spec.NodeSelector, gateway, nodeLabels)
		if err != nil {
			problems = append(problems, fmt.Sprintf("BGPPeer %s: %v", o.Name, err))
			continue
		}
		if !ok {
			continue
		}
		peer, err := PeerOf(&o, secret)
		if err != nil {
			problems = append(problems, fmt.Sprintf("BGPPeer %s: %v", o.Name, err))
			continue
		}
		if first, dup := owner[peer.Address]; dup {
			problems = append(problems, fmt.Sprintf("BGPPeer %s: address %v is BGPPeer %s's, which is older", o.Name, peer.Address, first))
			continue
		}
		owner[peer.Address] = o.Name
		peers = append(peers, peer)
	}
	slices.SortFunc(peers, func(a, b bgp.Peer) int { return a.Address.Compare(b.Address) })
	return peers, problems
}

// selects says whether an object with these gateways and nodeSelector selects gateway.
func selects(gateways []string, nodeSelector *metav1.LabelSelector, gateway string, nodeLabels labels.Set) (bool, error) {
	if len(gateways) == 0 && nodeSelector == nil {
		return true, nil
	}
	if slices.Contains(gateways, gateway) {
		return true, nil
	}
	if nodeSelector == nil || nodeLabels == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(nodeSelector)
	if err != nil {
		return false, fmt.Errorf("spec.nodeSelector: %w", err)
	}
	return sel.Matches(nodeLabels), nil
}

// PeerOf converts a BGPPeer object to the speaker's peer, reading its password through secret,
// and checks it as the speaker will (bgp.Peer.Validate).
func PeerOf(o *v1alpha1.BGPPeer, secret func(*v1alpha1.SecretKeyRef) (string, error)) (bgp.Peer, error) {
	s := o.Spec
	a, err := netip.ParseAddr(s.Address)
	if err != nil {
		return bgp.Peer{}, fmt.Errorf("spec.address %q: %w", s.Address, err)
	}
	p := bgp.Peer{Address: a, ASN: uint32(s.ASN), Port: uint16(s.Port), MultihopTTL: uint8(s.MultihopTTL), Passive: s.Passive}
	if s.ASN < 1 || s.ASN > 1<<32-1 || s.Port < 0 || s.Port > 65535 || s.MultihopTTL < 0 || s.MultihopTTL > 255 {
		return bgp.Peer{}, fmt.Errorf("spec: asn, port or multihopTTL out of range")
	}
	dur := func(d *metav1.Duration) time.Duration {
		if d == nil {
			return 0
		}
		return d.Duration
	}
	p.HoldTime, p.KeepaliveTime, p.ConnectRetry = dur(s.HoldTime), dur(s.KeepaliveTime), dur(s.ConnectRetry)
	if s.LocalAddress != "" {
		if p.LocalAddress, err = netip.ParseAddr(s.LocalAddress); err != nil {
			return bgp.Peer{}, fmt.Errorf("spec.localAddress %q: %w", s.LocalAddress, err)
		}
	}
	if b := s.BFD; b != nil && b.Enabled {
		if b.Multiplier < 0 || b.Multiplier > 255 {
			return bgp.Peer{}, fmt.Errorf("spec.bfd.multiplier %d: out of range", b.Multiplier)
		}
		p.BFD = bgp.BFD{Enabled: true, TransmitInterval: dur(b.TransmitInterval), ReceiveInterval: dur(b.ReceiveInterval),
			Multiplier: uint8(b.Multiplier), HoldDown: dur(b.HoldDown)}
	}
	if ref := s.PasswordSecretRef; ref != nil {
		if secret == nil {
			return bgp.Peer{}, fmt.Errorf("spec.passwordSecretRef: no Secret can be read")
		}
		pw, err := secret(ref)
		if err != nil {
			return bgp.Peer{}, fmt.Errorf("spec.passwordSecretRef: %w", err)
		}
		if pw == "" {
			return bgp.Peer{}, fmt.Errorf("spec.passwordSecretRef: the password is empty")
		}
		p.Password = pw
	}
	if err := p.Validate(); err != nil {
		return bgp.Peer{}, err
	}
	return p, nil
}

// MergeAdvertisements returns the route attributes of the BGPAdvertisements that select
// gateway (as SelectPeers selects): the union of their communities and large communities, and
// the LOCAL_PREF and MED of the oldest that sets one; an object that sets another value, or
// does not parse, is reported (one message each).
func MergeAdvertisements(objs []v1alpha1.BGPAdvertisement, gateway string, nodeLabels labels.Set) (lb.RouteAttributes, []string) {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b v1alpha1.BGPAdvertisement) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out lb.RouteAttributes
	var problems []string
	var prefFrom, medFrom string
	for _, o := range objs {
		ok, err := selects(o.Spec.Gateways, o.Spec.NodeSelector, gateway, nodeLabels)
		if err != nil {
			problems = append(problems, fmt.Sprintf("BGPAdvertisement %s: %v", o.Name, err))
			continue
		}
		if !ok {
			continue
		}
		r, err := routeOf(&o.Spec.RouteAttributes, "spec")
		if err != nil {
			problems = append(problems, fmt.Sprintf("BGPAdvertisement %s: %v", o.Name, err))
			continue
		}
		for _, c := range r.Communities {
			if !slices.Contains(out.Communities, c) {
				out.Communities = append(out.Communities, c)
			}
		}
		for _, c := range r.LargeCommunities {
			if !slices.Contains(out.LargeCommunities, c) {
				out.LargeCommunities = append(out.LargeCommunities, c)
			}
		}
		switch {
		case r.LocalPref == nil:
		case out.LocalPref == nil:
			out.LocalPref, prefFrom = r.LocalPref, o.Name
		case *out.LocalPref != *r.LocalPref:
			problems = append(problems, fmt.Sprintf("BGPAdvertisement %s: localPref %d ignored: the older %s sets %d", o.Name, *r.LocalPref, prefFrom, *out.LocalPref))
		}
		switch {
		case r.MED == nil:
		case out.MED == nil:
			out.MED, medFrom = r.MED, o.Name
		case *out.MED != *r.MED:
			problems = append(problems, fmt.Sprintf("BGPAdvertisement %s: med %d ignored: the older %s sets %d", o.Name, *r.MED, medFrom, *out.MED))
		}
	}
	slices.Sort(out.Communities)
	slices.SortFunc(out.LargeCommunities, func(a, b bgp.LargeCommunity) int { return strings.Compare(a.String(), b.String()) })
	return out, problems
}

// BGPPeerObject returns the BGPPeer object equivalent to the speaker's peer p for the gateway
// named gateway (selected by name), with its password, if any, in passwordSecret (PeerOf of it,
// with that Secret, gives p back but for PasswordFile → Password). It is what `xlb convert`
// writes for a gateway file's peers.
func BGPPeerObject(name, gateway string, p bgp.Peer, passwordSecret string) v1alpha1.BGPPeer {
	o := v1alpha1.BGPPeer{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.BGPPeerSpec{Address: p.Address.String(), ASN: int64(p.ASN), Port: int32(p.Port),
			MultihopTTL: int32(p.MultihopTTL), Passive: p.Passive, Gateways: []string{gateway}},
	}
	dur := func(d time.Duration) *metav1.Duration {
		if d == 0 {
			return nil
		}
		return &metav1.Duration{Duration: d}
	}
	o.Spec.HoldTime, o.Spec.KeepaliveTime, o.Spec.ConnectRetry = dur(p.HoldTime), dur(p.KeepaliveTime), dur(p.ConnectRetry)
	if p.LocalAddress.IsValid() {
		o.Spec.LocalAddress = p.LocalAddress.String()
	}
	if p.BFD.Enabled {
		o.Spec.BFD = &v1alpha1.BFD{Enabled: true, TransmitInterval: dur(p.BFD.TransmitInterval),
			ReceiveInterval: dur(p.BFD.ReceiveInterval), Multiplier: int32(p.BFD.Multiplier), HoldDown: dur(p.BFD.HoldDown)}
	}
	if passwordSecret != "" {
		o.Spec.PasswordSecretRef = &v1alpha1.SecretKeyRef{Name: passwordSecret}
	}
	return o
}

// BGPAdvertisementObject returns the BGPAdvertisement object that gives the gateway named
// gateway the route attributes r (MergeAdvertisements of it alone gives r back).
func BGPAdvertisementObject(name, gateway string, r lb.RouteAttributes) v1alpha1.BGPAdvertisement {
	a := AddressPoolObject(Pool{Route: r}, 0).Spec.BGP
	o := v1alpha1.BGPAdvertisement{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "BGPAdvertisement"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.BGPAdvertisementSpec{Gateways: []string{gateway}},
	}
	if a != nil {
		o.Spec.RouteAttributes = *a
	}
	return o
}

// report records each new problem as a Warning Event on its object (a problem's message starts
// with the object's kind and name), once per distinct message.
func (p *PeerSource) report(problems []string) {
	for _, m := range problems {
		if p.reported[m] {
			continue
		}
		p.reported[m] = true
		kind, rest, _ := strings.Cut(m, " ")
		name, msg, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		var store cache.Store
		switch kind {
		case "BGPPeer":
			store = p.informer.GetStore()
		case "BGPAdvertisement":
			store = p.ads.GetStore()
		default:
			continue
		}
		o, exists, err := store.GetByKey(name)
		if err != nil || !exists {
			continue
		}
		if u, ok := o.(*unstructured.Unstructured); ok {
			p.recorder.Eventf(u, corev1.EventTypeWarning, "NotUsed", "gateway %s: %s", p.opts.Gateway, msg)
		}
	}
}
