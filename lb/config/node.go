// SPDX-License-Identifier: Apache-2.0
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// decoder walks a YAML document, checking each value against the schema, and collects the
// errors. Its methods report what is wrong themselves and return ok = false; callers then
// leave the value out rather than report the consequences again.
type decoder struct {
	file string
	errs []*Error
}

func (d *decoder) fail(n *yaml.Node, path string, err error) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Path: path, Err: err})
}

func (d *decoder) failf(n *yaml.Node, path, format string, args ...any) {
	d.fail(n, path, fmt.Errorf(format, args...))
}

// mark returns a count to pass to clean.
func (d *decoder) mark() int { return len(d.errs) }

// clean reports whether no error was found since mark returned m.
func (d *decoder) clean(m int) bool { return len(d.errs) == m }

// at is the path of field key under path.
func at(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// index is the path of item i of the list at path.
func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe says what a node is, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return strconv.Quote(n.Value)
		case "!!null":
			return "null"
		case "!!binary":
			return "binary data"
		}
		return n.Value
	}
	return "an alias"
}

// object is a YAML mapping whose keys have been checked against a schema.
type object struct {
	// node is the mapping, for the line of errors about a missing field.
	node *yaml.Node
	path string
	// vals: key → its value (aliases resolved). Keys whose value is null are left out: a null
	// field is an absent one.
	vals map[string]*yaml.Node
	// guessed: the known keys that an unknown key was taken for a misspelling of ("did you
	// mean"); they are not reported missing as well.
	guessed map[string]bool
	// partial is set when a merge failed: no field is reported missing, it may be in the merge.
	partial bool
}

// get returns the value of key, or nil when it is absent or null.
func (o object) get(key string) *yaml.Node { return o.vals[key] }

// at is the path of field key.
func (o object) at(key string) string { return at(o.path, key) }

// required returns the value of key, or reports it missing ("missing (why)") and returns nil.
func (d *decoder) required(o object, key, why string) *yaml.Node {
	v := o.get(key)
	if v == nil && !o.guessed[key] && !o.partial {
		d.failf(o.node, o.at(key), "missing (%s)", why)
	}
	return v
}

// mapPair is one key and value of a mapping.
type mapPair struct{ key, val *yaml.Node }

// object checks that n is a mapping whose keys are strings from known (any string when known
// is nil), each given once, and returns its fields. Merge keys (<<: *anchor) are honoured: the
// merged mappings' fields fill in those the mapping does not set itself. ok is false only
// when n is not a mapping; bad keys are reported and left out.
func (d *decoder) object(n *yaml.Node, path string, known []string) (o object, ok bool) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.failf(n, path, "want a mapping, got %s", describe(n))
		return object{}, false
	}
	o = object{node: n, path: path, vals: map[string]*yaml.Node{}, guessed: map[string]bool{}}
	m := d.mark()
	own, merged := d.pairs(n, path, nil)
	o.partial = !d.clean(m)
	lines := map[string]int{}
	for i, p := range append(own, merged...) {
		isMerged := i >= len(own)
		if p.key.Kind != yaml.ScalarNode || p.key.ShortTag() != "!!str" {
			d.failf(p.key, path, "field name %s is not a string", describe(p.key))
			continue
		}
		k := p.key.Value
		if first, dup := lines[k]; dup {
			if !isMerged { // a merged field is overridden by the mapping's own
				d.failf(p.key, at(path, k), "set twice (first on line %d)", first)
			}
			continue
		}
		lines[k] = p.key.Line
		if known != nil && !slices.Contains(known, k) {
			guess, msg := suggest(k, known)
			o.guessed[guess] = true
			d.failf(p.key, at(path, k), "unknown field%s", msg)
			continue
		}
		if v := resolve(p.val); !isNull(v) {
			o.vals[k] = v
		}
	}
	return o, true
}

// maxMerged bounds the fields merge keys may bring into one mapping, so that merges of merges
// of merges cannot make a small file expensive to walk.
const maxMerged = 10000

// pairs splits mapping n into its own key-value pairs and those merged in by merge keys, in
// order of precedence. chain holds the mappings whose merges led to n, to refuse a cycle.
func (d *decoder) pairs(n *yaml.Node, path string, chain []*yaml.Node) (own, merged []mapPair) {
	type source struct{ key, val *yaml.Node } // a merge key and one mapping it merges
	var sources []source
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			v = resolve(v)
			if v.Kind == yaml.SequenceNode {
				for _, item := range v.Content {
					sources = append(sources, source{k, resolve(item)})
				}
			} else {
				sources = append(sources, source{k, v})
			}
			continue
		}
		own = append(own, mapPair{k, v})
	}
	chain = append(chain, n)
	for _, src := range sources {
		switch {
		case src.val.Kind != yaml.MappingNode:
			d.failf(src.key, at(path, "<<"), "want a mapping (or a list of mappings) to merge, got %s", describe(src.val))
		case slices.Contains(chain, src.val):
			d.failf(src.key, at(path, "<<"), "merges a mapping into itself")
		default:
			o, m := d.pairs(src.val, path, chain)
			merged = append(append(merged, o...), m...)
			if len(merged) > maxMerged {
				d.failf(src.key, at(path, "<<"), "merges more than %d fields", maxMerged)
				return own, nil
			}
		}
	}
	return own, merged
}

// suggest returns the known field closest to an unknown one and " (did you mean "x"?)", or ""
// and the list of known fields when none is close.
func suggest(key string, known []string) (guess, msg string) {
	best, bestDist := "", 3
	for _, k := range known {
		if strings.EqualFold(k, key) {
			best, bestDist = k, -1
			break
		}
		if dist := editDistance(strings.ToLower(k), strings.ToLower(key)); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return best, fmt.Sprintf(" (did you mean %q?)", best)
	}
	return "", " (known fields: " + strings.Join(known, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// list checks that n is a list and returns its items, aliases resolved.
func (d *decoder) list(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.failf(n, path, "want a list, got %s", describe(n))
		return nil, false
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, item := range n.Content {
		items[i] = resolve(item)
	}
	return items, true
}

// str checks that n is a string.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		hint := ""
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			hint = " (quote it to make it a string)"
		}
		d.failf(n, path, "want a string, got %s%s", describe(n), hint)
		return "", false
	}
	return n.Value, true
}

// nonEmpty checks that n is a string other than "".
func (d *decoder) nonEmpty(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.failf(n, path, "empty")
		return "", false
	}
	return s, ok
}

// integerLike matches a plain integer too large for yaml.v3, which then calls it a float.
var integerLike = regexp.MustCompile(`^[-+]?[0-9_]+$`)

// leadingZero matches a plain decimal integer with a leading zero, which yaml.v3 reads as octal
// (010 is 8) or as a float (080).
var leadingZero = regexp.MustCompile(`^[-+]?0[0-9_]+$`)

// integer checks that n is an integer from lo to hi.
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = resolve(n)
	var v int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() != "!!str" && leadingZero.MatchString(n.Value):
		d.failf(n, path, "%s has a leading zero (write it without; for octal, write 0o)", n.Value)
		return 0, false
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		if n.Decode(&v) != nil {
			d.failf(n, path, "%s is out of range (%d to %d)", n.Value, lo, hi)
			return 0, false
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && integerLike.MatchString(n.Value):
		d.failf(n, path, "%s is out of range (%d to %d)", n.Value, lo, hi)
		return 0, false
	default:
		d.failf(n, path, "want an integer, got %s", describe(n))
		return 0, false
	}
	switch {
	case v < 0 && lo == 0:
		d.failf(n, path, "%d is negative (want %d to %d)", v, lo, hi)
		return 0, false
	case v < lo || v > hi:
		d.failf(n, path, "%d is out of range (%d to %d)", v, lo, hi)
		return 0, false
	}
	return v, true
}

// uint16Of checks that n is an integer from lo to 65535.
func (d *decoder) uint16Of(n *yaml.Node, path string, lo int64) (uint16, bool) {
	v, ok := d.integer(n, path, lo, 65535)
	return uint16(v), ok
}

// uint32Of checks that n is an integer from 0 to 4294967295.
func (d *decoder) uint32Of(n *yaml.Node, path string) (uint32, bool) {
	v, ok := d.integer(n, path, 0, 1<<32-1)
	return uint32(v), ok
}

// duration checks that n is a Go duration string ("1h30m", "500ms").
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		d.failf(n, path, "want a duration with a unit, such as %ss, got %s", n.Value, n.Value)
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.failf(n, path, "want a duration such as 2s or 1h30m, got %s", describe(n))
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.failf(n, path, "%q is not a duration (want a number and a unit, such as 500ms, 2s or 1h30m)", n.Value)
		return 0, false
	}
	return v, true
}

// positiveDuration checks that n is a duration above zero.
func (d *decoder) positiveDuration(n *yaml.Node, path string) (time.Duration, bool) {
	v, ok := d.duration(n, path)
	if ok && v <= 0 {
		d.failf(n, path, "%s is not above zero", v)
		return 0, false
	}
	return v, ok
}

// enum checks that n is one of the strings in allowed; what names the field in the message.
func (d *decoder) enum(n *yaml.Node, path, what string, allowed ...string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		d.failf(n, path, "unknown %s %q (want %s)", what, s, alternatives(allowed))
		return "", false
	}
	return s, true
}

// alternatives returns "a", "a or b", "a, b or c".
func alternatives(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
}

// uniqueItems parses each item of a list with parse, in order, and reports an item equal to an
// earlier one as a duplicate naming the first's place; it returns the valid, distinct values.
func uniqueItems[T interface {
	comparable
	String() string
}](d *decoder, items []*yaml.Node, path string, parse func(*yaml.Node, string) (T, bool)) []T {
	var out []T
	seen := map[T]place{}
	for i, item := range items {
		p := index(path, i)
		v, ok := parse(item, p)
		if !ok {
			continue
		}
		if first, dup := seen[v]; dup {
			d.fail(item, p, errDuplicate(v.String(), first))
			continue
		}
		seen[v] = place{p, item.Line}
		out = append(out, v)
	}
	return out
}

// addr checks that n is a unicast IP address usable as a VIP or backend, and returns it with
// an IPv4-mapped IPv6 address unmapped.
func (d *decoder) addr(n *yaml.Node, path string) (netip.Addr, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		d.failf(n, path, "%q is not an IP address", s)
		return netip.Addr{}, false
	}
	if err := usable(a); err != nil {
		d.fail(n, path, err)
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// usable says why a is not a usable unicast address, if it is not.
func usable(a netip.Addr) error {
	switch {
	case a.Zone() != "":
		return fmt.Errorf("%s has a zone (%%%s); zoned addresses cannot be balanced", a, a.Zone())
	case a.IsUnspecified():
		return fmt.Errorf("%s is the unspecified address, not a usable unicast address", a)
	case a.IsMulticast():
		return fmt.Errorf("%s is a multicast address, not a usable unicast address", a)
	}
	return nil
}

// prefix checks that n is a prefix without host bits ("198.18.0.0/15").
func (d *decoder) prefix(n *yaml.Node, path string) (netip.Prefix, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.failf(n, path, "%q is not a prefix (want an address and a length, such as 198.18.0.0/15 or 2001:db8::/32)", s)
		return netip.Prefix{}, false
	}
	if p.Addr().Is4In6() {
		d.failf(n, path, "%s is an IPv4-mapped IPv6 prefix; write it in IPv4 form", p)
		return netip.Prefix{}, false
	}
	if p.Masked() != p {
		d.failf(n, path, "%s has host bits set (did you mean %s?)", p, p.Masked())
		return netip.Prefix{}, false
	}
	return p, true
}

// bytesOf checks that n is a string (its UTF-8 bytes) or !!binary (base64-decoded).
func (d *decoder) bytesOf(n *yaml.Node, path string) ([]byte, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!binary" {
		var s string
		if err := n.Decode(&s); err != nil {
			d.failf(n, path, "!!binary value is not valid base64")
			return nil, false
		}
		return []byte(s), true
	}
	s, ok := d.str(n, path)
	return []byte(s), ok
}

// place is where a value was first seen, to report a duplicate.
type place struct {
	path string
	line int
}

// errDuplicate is what a duplicate says after the value.
func errDuplicate(value string, first place) error {
	return errors.New(value + " is already used by " + first.path + " (line " + strconv.Itoa(first.line) + ")")
}
