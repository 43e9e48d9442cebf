package xdp

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlb-dev/xlb/internal/netlab"
	"github.com/xlb-dev/xlb/xdp/datapath"
)

// TestLoadCarriesOldReverseOver: a reverse map pinned by a build whose rev_value had no
// candidates (8 bytes) is replaced at load with its entries kept, so a loader upgrade does not
// stop the replies of running services from being translated.
func TestLoadCarriesOldReverseOver(t *testing.T) {
	dir, opts := pinnedOptions(t, "m")
	d1, err := Load(opts)
	must(t, err)
	must(t, d1.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d1.UpsertBackend(1, datapath.Backend{Addr: be1v4, Port: 8080}))
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
	key := svcKey(be1v4, 8080, datapath.TCP)
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
	ep := datapath.Endpoint{Addr: be1v4, Port: 8080, Proto: datapath.TCP}
	if len(rev) != 1 || rev[ep] != (datapath.ReverseNAT{VIP: 1}) {
		t.Fatalf("reverse entries after the upgrade: %+v", rev)
	}
	var v xlbRevValue
	must(t, d2.objs.Reverse.Lookup(&key, &v))
	if v.VipPort != binary.LittleEndian.Uint16([]byte{0, 80}) || v.Cand != [datapath.MaxReverseCandidates]uint32{} {
		t.Fatalf("carried-over value %+v, want vip_port 80 (network order), no candidates", v)
	}
}

// TestLoadRemovesRetiredPins: the address filter pinned by a build with the murmur filter hash
// (addr_filter) is unpinned at load; this build's bitmap is addr_bitmap, rebuilt from the maps.
func TestLoadRemovesRetiredPins(t *testing.T) {
	dir, opts := pinnedOptions(t, "r")
	d1, err := Load(opts)
	must(t, err)
	must(t, d1.UpsertVIP(datapath.Frontend{Addr: vip4, Port: 80, Proto: datapath.TCP}, datapath.VIPConfig{ID: 1}))
	must(t, d1.Close())

	// What the earlier build pinned: addr_filter, 2048 words, and no addr_bitmap (Load must
	// create it and rebuild it from vips).
	must(t, os.Remove(filepath.Join(dir, xlbMapAddrBitmap)))
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: "addr_filter", Type: ebpf.Array, KeySize: 4, ValueSize: 8,
		MaxEntries: 2 * addrFilterWords})
	must(t, err)
	defer old.Close()
	must(t, old.Pin(filepath.Join(dir, "addr_filter")))

	d2, err := Load(opts)
	must(t, err)
	defer d2.Close()
	if _, err := os.Stat(filepath.Join(dir, "addr_filter")); !os.IsNotExist(err) {
		t.Errorf("the retired addr_filter pin is still there after Load: %v", err)
	}
	var word uint64
	must(t, d2.objs.AddrBitmap.Lookup(filterBit(vip4)/64, &word))
	if word&(1<<(filterBit(vip4)%64)) == 0 {
		t.Errorf("addr_bitmap has no bit for the pinned VIP %v after Load", vip4)
	}
}

// pinnedOptions returns a pin directory of its own (tag: a suffix for its name) and small
// Options pinning there; the pins and the directory are removed when the test ends.
func pinnedOptions(t *testing.T, tag string) (string, Options) {
	dir := "/sys/fs/bpf/" + netlab.Prefix() + tag
	opts := Options{PinPath: dir, MaglevSlots: 1 << 16, Settings: datapath.Settings{ConntrackSize: 4096}}
	t.Cleanup(func() {
		if d, err := Load(opts); err == nil {
			d.Remove()
		}
		os.RemoveAll(dir)
	})
	return dir, opts
}
