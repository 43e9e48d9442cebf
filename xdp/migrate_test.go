package xdp

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
)

// TestLoadCarriesOldReverseOver: a reverse map pinned by a build whose rev_value had no
// candidates (8 bytes) is replaced at load with its entries kept, so a loader upgrade does not
// stop the replies of running services from being translated.
func TestLoadCarriesOldReverseOver(t *testing.T) {
	dir := "/sys/fs/bpf/" + netlab.Prefix() + "m"
	opts := Options{PinPath: dir, ConntrackSize: 4096, MaglevSlots: 1 << 16}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(dir)
	})
	d1, err := Load(opts)
	must(t, err)
	must(t, d1.UpsertVIP(Frontend{vip4, 80, TCP}, VIPConfig{ID: 1}))
	must(t, d1.UpsertBackend(1, Backend{Addr: be1v4, Port: 8080}))
	must(t, d1.Close())

	// What the earlier build pinned: {vip_id 1, vip_port 80, flags 0} for be1v4:8080/TCP.
	path := filepath.Join(dir, xlbMapReverse)
	spec, err := loadXlb()
	must(t, err)
	old := spec.Maps[xlbMapReverse].Copy()
	old.ValueSize, old.Pinning, old.Contents = oldRevValueSize, ebpf.PinNone, nil
	m, err := ebpf.NewMap(old)
	must(t, err)
	defer m.Close()
	key := svcKey(be1v4, 8080, TCP)
	val := make([]byte, oldRevValueSize)
	binary.LittleEndian.PutUint32(val, 1)
	binary.BigEndian.PutUint16(val[4:], 80)
	must(t, m.Put(&key, val))
	must(t, os.Remove(path))
	must(t, m.Pin(path))

	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	rev, err := d2.Reverses()
	must(t, err)
	ep := Endpoint{Addr: be1v4, Port: 8080, Proto: TCP}
	if len(rev) != 1 || rev[ep] != (ReverseNAT{VIP: 1}) {
		t.Fatalf("reverse entries after the upgrade: %+v", rev)
	}
	var v xlbRevValue
	must(t, d2.objs.Reverse.Lookup(&key, &v))
	if v.VipPort != binary.LittleEndian.Uint16([]byte{0, 80}) || v.Cand != [MaxReverseCandidates]uint32{} {
		t.Fatalf("carried-over value %+v, want vip_port 80 (network order), no candidates", v)
	}
}
