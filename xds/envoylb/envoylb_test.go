package envoylb

import (
	"fmt"
	"math"
	"testing"
)

// ports makes hosts 127.0.0.1:p for each port, with the given weights (1
// if none).
func ports(ps []int, weights ...uint32) []Host {
	var hs []Host
	for i, p := range ps {
		h := Host{Address: fmt.Sprintf("127.0.0.1:%d", p), Hostname: fmt.Sprint(p), Weight: 1}
		if i < len(weights) {
			h.Weight = weights[i]
		}
		hs = append(hs, h)
	}
	return hs
}

func mustNew(t *testing.T, hosts []Host, c Config) *Balancer {
	t.Helper()
	b, err := New(hosts, c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkAssignments checks the host chosen for hash i, i = 0.. three
// times around, as Envoy's Maglev tests do.
func checkAssignments(t *testing.T, name string, b *Balancer, want []int) {
	t.Helper()
	for i := range 3 * len(want) {
		if got := b.Owner(uint64(i)); got != want[i%len(want)] {
			t.Errorf("%s: hash %d → host %d, want %d", name, i, got, want[i%len(want)])
		}
	}
}

func entries(b *Balancer) (lo, hi int) {
	lo = math.MaxInt
	var counts []int
	switch t := b.Table.(type) {
	case *MaglevTable:
		counts = t.Counts
	case *Ring:
		counts = t.Counts
	}
	for _, w := range b.Weights {
		lo, hi = min(lo, counts[w.Host]), max(hi, counts[w.Host])
	}
	return lo, hi
}

// TestXXH64 reproduces test/common/common/hash_test.cc (Hash.xxHash,
// Hash.xxHashWithVector).
func TestXXH64(t *testing.T) {
	for s, want := range map[string]uint64{
		"foo": 3728699739546630719, "bar": 5234164152756840025,
		"foo\nbar": 8917841378505826757, "lyft": 4400747396090729504, "": 17241709254077376921,
	} {
		if got := seeded(s, 0); got != want {
			t.Errorf("XXH64(%q) = %d, want %d", s, got, want)
		}
	}
	if got := xxh64Join([]string{"foo", "bar"}); got != 17745830980996999794 {
		t.Errorf("XXH64 over [foo bar] = %d", got)
	}
	// Seeded vectors of the reference implementation (xxhsum -H64 with
	// seed): XXH64("", 1) and XXH64("a", 1).
	if got := seeded("", 1); got != 0xd5afba1336a3be4b {
		t.Errorf("XXH64(\"\", 1) = %#x", got)
	}
}

// TestMaglev reproduces the tables of Envoy's
// test/extensions/load_balancing_policies/maglev/maglev_lb_test.cc.
func TestMaglev(t *testing.T) {
	six := []int{90, 91, 92, 93, 94, 95}
	for _, tc := range []struct {
		name   string // the Envoy test
		hosts  []Host
		c      Config
		lo, hi int
		want   []int
	}{
		// MaglevLoadBalancerTest.Basic (and BasicStability).
		{"Basic", ports(six), Config{TableSize: 7}, 1, 2, []int{2, 4, 0, 1, 5, 0, 3}},
		// MaglevLoadBalancerTest.BasicWithHostName.
		{"BasicWithHostName", ports(six), Config{TableSize: 7, UseHostname: true}, 1, 2, []int{2, 5, 0, 3, 4, 1, 0}},
		// MaglevLoadBalancerTest.Weighted.
		{"Weighted", ports([]int{90, 91}, 1, 2), Config{TableSize: 17}, 6, 11,
			[]int{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1}},
		// MaglevLoadBalancerTest.WeightedSingleHost.
		{"WeightedSingleHost", ports([]int{90}, 7), Config{TableSize: 17}, 17, 17, []int{0}},
	} {
		b := mustNew(t, tc.hosts, tc.c)
		checkAssignments(t, tc.name, b, tc.want)
		if lo, hi := entries(b); tc.name != "WeightedSingleHost" && (lo != tc.lo || hi != tc.hi) {
			t.Errorf("%s: entries per host %d..%d, want %d..%d", tc.name, lo, hi, tc.lo, tc.hi)
		}
	}

	// MaglevLoadBalancerTest.BasicWithMetadataHashKey: the envoy.lb
	// hash_key wins over the address.
	hs := ports(six)
	for i := range hs {
		hs[i].HashKey, hs[i].Hostname = hs[i].Hostname, ""
	}
	checkAssignments(t, "BasicWithMetadataHashKey", mustNew(t, hs, Config{TableSize: 7}), []int{2, 5, 0, 3, 4, 1, 0})

	// MaglevLoadBalancerTest.LocalityWeightedSameLocalityWeights and
	// LocalityWeightedGlobalPanic (no healthy host: every host, in panic).
	same := ports([]int{90, 91}, 1, 2)
	same[1].Locality = 1
	c := Config{TableSize: 17, LocalityWeighted: true, LocalityWeights: []uint32{1, 1}}
	want := []int{1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1}
	checkAssignments(t, "LocalityWeightedSameLocalityWeights", mustNew(t, same, c), want)
	for i := range same {
		same[i].Health = Unhealthy
	}
	panicking := mustNew(t, same, c)
	if !panicking.Panic {
		t.Error("LocalityWeightedGlobalPanic: not in panic")
	}
	checkAssignments(t, "LocalityWeightedGlobalPanic", panicking, want)

	// MaglevLoadBalancerTest.LocalityWeightedDifferentLocalityWeights:
	// :92's locality weighs 0.
	diff := ports([]int{90, 91, 92}, 1, 2, 3)
	diff[0].Locality, diff[1].Locality, diff[2].Locality = 0, 2, 1
	b := mustNew(t, diff, Config{TableSize: 17, LocalityWeighted: true, LocalityWeights: []uint32{8, 0, 2}})
	checkAssignments(t, "LocalityWeightedDifferentLocalityWeights", b, []int{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0})
	if lo, hi := entries(b); lo != 4 || hi != 13 {
		t.Errorf("LocalityWeightedDifferentLocalityWeights: entries %d..%d, want 4..13", lo, hi)
	}

	// MaglevLoadBalancerTest.LocalityWeightedLopsided: 1,023 light hosts
	// take one slot each, the heavy one the rest.
	var lop []Host
	for i := range 1024 {
		h := Host{Address: fmt.Sprintf("127.0.0.1:%d", i), Weight: 1}
		if i > 0 {
			h.Locality = 1
		}
		lop = append(lop, h)
	}
	b = mustNew(t, lop, Config{LocalityWeighted: true, LocalityWeights: []uint32{127, 1}})
	if lo, hi := entries(b); lo != 1 || hi != DefaultTableSize-1023 {
		t.Errorf("LocalityWeightedLopsided: entries %d..%d, want 1..%d", lo, hi, DefaultTableSize-1023)
	}

	// MaglevLoadBalancerTest.BasicWithRetryHostPredicate: hash 10, retry
	// attempts 1 and 2.
	basic := mustNew(t, ports(six), Config{TableSize: 7})
	for attempt, want := range []int{1, 0, 5} {
		if got := basic.Table.Choose(10, uint32(attempt)); got != want {
			t.Errorf("BasicWithRetryHostPredicate: attempt %d → %d, want %d", attempt, got, want)
		}
	}

	// MaglevLoadBalancerTest.NoPrimeNumber, NoHost.
	if _, err := New(nil, Config{TableSize: 8}); err == nil {
		t.Error("NoPrimeNumber: table size 8 accepted")
	}
	if got := mustNew(t, nil, Config{TableSize: 7}).Owner(1); got != -1 {
		t.Errorf("NoHost: %d", got)
	}
}

// TestRingHash reproduces the rings of Envoy's
// test/extensions/load_balancing_policies/ring_hash/ring_hash_lb_test.cc.
func TestRingHash(t *testing.T) {
	six := []int{90, 91, 92, 93, 94, 95}
	type pick struct {
		hash uint64
		host int
	}
	check := func(name string, b *Balancer, size, lo, hi int, picks []pick) {
		t.Helper()
		r := b.Table.(*Ring)
		if len(r.Hashes) != size {
			t.Errorf("%s: ring size %d, want %d", name, len(r.Hashes), size)
		}
		if l, h := entries(b); l != lo || h != hi {
			t.Errorf("%s: hashes per host %d..%d, want %d..%d", name, l, h, lo, hi)
		}
		for _, p := range picks {
			if got := b.Owner(p.hash); got != p.host {
				t.Errorf("%s: hash %d → host %d, want %d", name, p.hash, got, p.host)
			}
		}
	}
	ring := func(min, max uint64) Config { return Config{Algorithm: RingHash, MinRingSize: min, MaxRingSize: max} }

	// RingHashLoadBalancerTest.Basic: the ring's first entry (:94,
	// 833437586790550860) owns 0 and, wrapping, the largest hash.
	basic := mustNew(t, ports(six), ring(12, 0))
	check("Basic", basic, 12, 2, 2, []pick{{0, 4}, {math.MaxUint64, 4}, {3551244743356806947, 5}, {3551244743356806948, 3}, {16117243373044804880, 0}})
	if r := basic.Table.(*Ring); r.Hashes[0] != 833437586790550860 || r.Hashes[11] != 16117243373044804889 {
		t.Errorf("Basic: ring from %d to %d", r.Hashes[0], r.Hashes[11])
	}
	// Basic, then no healthy host: panic, every host.
	sick := ports(six)
	for i := range sick {
		sick[i].Health = Unhealthy
	}
	if b := mustNew(t, sick, ring(12, 0)); !b.Panic || b.Owner(0) != 4 {
		t.Errorf("Basic in panic: panic %v, hash 0 → %d", b.Panic, b.Owner(0))
	}
	// RingHashLoadBalancerTest.BasicWithHostname.
	hostname := ring(12, 0)
	hostname.UseHostname = true
	byName := []pick{{0, 5}, {math.MaxUint64, 5}, {7225015537174310577, 2}, {6803900775736438537, 3}}
	check("BasicWithHostname", mustNew(t, ports(six), hostname), 12, 2, 2, byName)
	// RingHashLoadBalancerTest.BasicWithMetadataHashKey.
	hs := ports(six)
	for i := range hs {
		hs[i].HashKey, hs[i].Hostname = hs[i].Hostname, ""
	}
	check("BasicWithMetadataHashKey", mustNew(t, hs, ring(12, 0)), 12, 2, 2, byName)

	// RingHashLoadBalancerTest.BasicWithRetryHostPredicate: hash 0, the
	// next entries on.
	for attempt, want := range map[uint32]int{0: 4, 1: 2, 2: 0, 13: 2} {
		if got := basic.Table.Choose(0, attempt); got != want {
			t.Errorf("BasicWithRetryHostPredicate: attempt %d → %d, want %d", attempt, got, want)
		}
	}

	// RingHashLoadBalancerTest.UnevenHosts: minimum 3 over two hosts
	// gives 2 each; then :80 leaves and :82 joins.
	check("UnevenHosts", mustNew(t, ports([]int{80, 81}), ring(3, 0)), 4, 2, 2, []pick{{0, 0}, {5454692015285649509, 0}, {7859399908942313493, 1}})
	check("UnevenHosts after", mustNew(t, ports([]int{81, 82}), ring(3, 0)), 4, 2, 2, []pick{{0, 0}, {8241336090459785962, 1}, {16064866803292627174, 0}})

	// RingHashLoadBalancerTest.HostWeightedTinyRing.
	tiny := []pick{{928266305478181108, 2}, {4443673547860492590, 2}, {5583722120771150861, 1}, {6311230543546372928, 1}, {13444792449719432967, 2}, {16117243373044804889, 0}}
	check("HostWeightedTinyRing", mustNew(t, ports([]int{90, 91, 92}, 1, 2, 3), ring(6, 6)), 6, 1, 3, tiny)

	// RingHashLoadBalancerTest.HostWeightedLargeRing: 6,000 hashes spread
	// 987 / 1,932 / 3,081.
	large := mustNew(t, ports([]int{90, 91, 92}, 1, 2, 3), ring(6144, 0))
	check("HostWeightedLargeRing", large, 6144, 1024, 3072, nil)
	if got := spread(large, 6000, 3); fmt.Sprint(got) != "[987 1932 3081]" {
		t.Errorf("HostWeightedLargeRing: spread %v", got)
	}

	// RingHashLoadBalancerTest.LocalityWeightedTinyRing: localities 1, 2,
	// 3, 0 give the same ring as host weights 1, 2, 3.
	loc := ports([]int{90, 91, 92, 93})
	for i := range loc {
		loc[i].Locality = i
	}
	lc := ring(6, 6)
	lc.LocalityWeighted, lc.LocalityWeights = true, []uint32{1, 2, 3, 0}
	check("LocalityWeightedTinyRing", mustNew(t, loc, lc), 6, 1, 3, tiny)

	// RingHashLoadBalancerTest.HostAndLocalityWeightedTinyRing.
	hl := ports([]int{90, 91, 92, 93}, 1, 2, 1, 2)
	hl[2].Locality, hl[3].Locality = 1, 1
	hlc := ring(9, 9)
	hlc.LocalityWeighted, hlc.LocalityWeights = true, []uint32{1, 2}
	check("HostAndLocalityWeightedTinyRing", mustNew(t, hl, hlc), 9, 1, 4, []pick{
		{928266305478181108, 2}, {3851675632748031481, 3}, {5583722120771150861, 1},
		{6311230543546372928, 1}, {7700377290971790572, 3}, {12559126875973811811, 3},
		{13444792449719432967, 2}, {13784988426630141778, 3}, {16117243373044804889, 0}})
	// RingHashLoadBalancerTest.HostAndLocalityWeightedLargeRing.
	hlc.MinRingSize, hlc.MaxRingSize = 9216, 0
	hlLarge := mustNew(t, hl, hlc)
	if got := spread(hlLarge, 9000, 4); fmt.Sprint(got) != "[924 2009 2053 4014]" {
		t.Errorf("HostAndLocalityWeightedLargeRing: spread %v", got)
	}

	// RingHashLoadBalancerTest.LargeFractionalScale: 511 and 512 entries,
	// 1,023 hashes spread 526 / 497.
	frac := mustNew(t, ports([]int{90, 91}), ring(1023, 1023))
	check("LargeFractionalScale", frac, 1023, 511, 512, nil)
	if got := spread(frac, 1023, 2); fmt.Sprint(got) != "[526 497]" {
		t.Errorf("LargeFractionalScale: spread %v", got)
	}

	// RingHashLoadBalancerTest.LopsidedWeightSmallScale: every 128th
	// light host gets an entry.
	var lop []Host
	for i := range 1024 {
		h := Host{Address: fmt.Sprintf("127.0.0.1:%d", i), Weight: 1}
		if i > 0 {
			h.Locality = 1
		}
		lop = append(lop, h)
	}
	lopc := ring(1024, 1024)
	lopc.LocalityWeighted, lopc.LocalityWeights = true, []uint32{127, 1}
	check("LopsidedWeightSmallScale", mustNew(t, lop, lopc), 1024, 0, 1016, []pick{
		{11664790346325243808, 1}, {15894554872961148518, 128}, {13958138884277627155, 256},
		{15803774069438192949, 384}, {3829253010855396576, 512}, {17918147347826565154, 640},
		{6442769608292299103, 768}, {5881074926069334434, 896}})

	// RingHashLoadBalancerTest.BadRingSizeBounds.
	if _, err := New(nil, ring(20, 10)); err == nil || err.Error() != "ring hash: minimum_ring_size (20) > maximum_ring_size (10)" {
		t.Errorf("BadRingSizeBounds: %v", err)
	}
}

// spread counts the hosts of n hashes i × (2⁶⁴−1)/n, as Envoy's large-ring
// tests do.
func spread(b *Balancer, n, hosts int) []int {
	out := make([]int, hosts)
	for i := range n {
		out[b.Owner(uint64(i)*(math.MaxUint64/uint64(n)))]++
	}
	return out
}

// TestBoundedLoad reproduces test/extensions/load_balancing_policies/
// common/bounded_load_hlb_test.cc: five hosts of equal weight on a table
// where hash i picks host i, a balance factor of 1 (one slot each), and a
// host with more than one request in flight overloaded.
func TestBoundedLoad(t *testing.T) {
	// The shuffles the tests quote: seed 2 gives 2 1 0 4 3, seed 6
	// 4 0 2 3 1, seed 7 0 1 4 3 2.
	for seed, want := range map[uint32]string{2: "[2 1 0 4 3]", 6: "[4 0 2 3 1]", 7: "[0 1 4 3 2]"} {
		idx := []uint32{0, 1, 2, 3, 4}
		r := newMT19937(seed)
		for i := range uint32(5) {
			j := uniform(r, 5-i)
			idx[i], idx[i+j] = idx[i+j], idx[i]
		}
		if fmt.Sprint(idx) != want {
			t.Errorf("shuffle with seed %d: %v, want %s", seed, idx, want)
		}
	}
	five := func(ring []int32, active ...uint32) (*Balancer, *Load) {
		var hosts []Host
		var ws []Weighted
		for i := range 5 {
			hosts = append(hosts, Host{Address: fmt.Sprintf("127.0.0.1%d:90", i), Weight: 1})
			ws = append(ws, Weighted{i, 0.2})
		}
		b := &Balancer{Hosts: hosts, Config: Config{HashBalanceFactor: 1}, Weights: ws, Table: fixed(ring), weightOf: map[int]float64{}}
		for _, w := range ws {
			b.weightOf[w.Host] = w.Weight
		}
		l := &Load{Active: make([]uint32, 5)}
		copy(l.Active, active)
		for _, a := range l.Active {
			l.Total += a
		}
		return b, l
	}
	identity := []int32{0, 1, 2, 3, 4}
	for _, tc := range []struct {
		name   string
		ring   []int32
		active []uint32
		hash   uint64
		want   int
	}{
		{"NoHostEverOverloaded", identity, nil, 3, 3},
		{"ActualHostOverloaded", identity, []uint32{0, 0, 2}, 2, 1},
		{"OneHostOverloaded", identity, []uint32{0, 0, 2}, 2, 1},
		{"MultipleHostOverloaded", identity, []uint32{2, 2, 2}, 2, 4},
		{"MultipleHashSameHostOverloaded/6", []int32{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, []uint32{0, 0, 0, 2}, 6, 4},
		{"MultipleHashSameHostOverloaded/7", []int32{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}, []uint32{0, 0, 0, 2}, 7, 0},
	} {
		b, l := five(tc.ring, tc.active...)
		// The tests count no cluster-wide requests: one slot each.
		l.Total = 0
		if got := b.Choose(tc.hash, l); got != tc.want {
			t.Errorf("%s: host %d, want %d", tc.name, got, tc.want)
		}
	}
	// AllHostsOverloaded: three hosts, .11 the least overloaded.
	b, l := five(identity, 3, 2, 4)
	b.Hosts, b.Weights = b.Hosts[:3], b.Weights[:3]
	l.Total = 0
	if got := b.Choose(0, l); got != 1 {
		t.Errorf("AllHostsOverloaded: host %d, want 1", got)
	}
}

// fixed is a table that gives hash h the host at h.
type fixed []int32

func (f fixed) Choose(h uint64, _ uint32) int { return int(f[h]) }
func (f fixed) Shares() []float64             { return nil }

func TestHashPolicy(t *testing.T) {
	x := func(s string) uint64 { return seeded(s, 0) }
	req := &Request{
		Path: "/v1/chat?a=1&session=q%20s&flag",
		Headers: [][2]string{
			{"X-Session-Id", "s1"}, {"cookie", "other=1; sid=\"c1\""}, {"x-multi", "b"}, {"x-multi", "a"},
		},
	}
	for _, tc := range []struct {
		name string
		p    HashPolicy
		want uint64
		ok   bool
	}{
		{"header, case-insensitive", HashPolicy{{Header: "x-session-id", Terminal: true}}, x("s1"), true},
		{"absent header", HashPolicy{{Header: "x-none"}}, 0, false},
		{"cookie, quotes removed", HashPolicy{{Cookie: "sid"}}, x("c1"), true},
		{"query parameter, undecoded", HashPolicy{{QueryParameter: "session"}}, x("q%20s"), true},
		{"query parameter without a value", HashPolicy{{QueryParameter: "flag"}}, x(""), true},
		{"repeated header, sorted", HashPolicy{{Header: "x-multi"}}, seeded("b", seeded("a", 0)), true},
		// The first terminal policy that produced a hash ends the chain.
		{"terminal", HashPolicy{{Header: "x-none", Terminal: true}, {Cookie: "sid", Terminal: true}, {Header: "x-session-id"}}, x("c1"), true},
		// Without terminal, hashes fold: rotate left one bit, then xor.
		{"folded", HashPolicy{{Cookie: "sid"}, {Header: "x-session-id"}}, (x("c1")<<1 | x("c1")>>63) ^ x("s1"), true},
	} {
		got, ok := tc.p.Hash(req)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// Vectors of Envoy's test/common/http/hash_policy_test.cc, and the hot
// keys' chain: a header that is not terminal, then a rewritten one.
func TestHashPolicyEnvoyVectors(t *testing.T) {
	x := func(s string) uint64 { return seeded(s, 0) }
	rw := func(pattern, sub string) *Rewrite {
		r, err := NewRewrite(pattern, sub)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		p       HashPolicy
		headers [][2]string
		want    uint64
		ok      bool
	}{
		// HeaderHashForSingleHeaderValue
		{"single value", HashPolicy{{Header: "x-test-header"}}, [][2]string{{"x-test-header", "test-value"}}, x("test-value"), true},
		// MultipleHeaderValues: the sorted values as one span.
		{"multiple values", HashPolicy{{Header: "x-multi-header"}}, [][2]string{{"x-multi-header", "value2"}, {"x-multi-header", "value1"}}, seeded("value2", seeded("value1", 0)), true},
		// HeaderNotPresent
		{"absent", HashPolicy{{Header: "x-missing-header"}}, nil, 0, false},
		// RegexRewriteApplied
		{"regex rewrite", HashPolicy{{Header: "x-test-header", Rewrite: rw("test", "replaced")}}, [][2]string{{"x-test-header", "test-value"}}, x("replaced-value"), true},
		// A group reference (RE2's \1) and a literal $.
		{"group", HashPolicy{{Header: "h", Rewrite: rw(`^([01]{3})[01]*$`, `\1`)}}, [][2]string{{"h", "01101100"}}, x("011"), true},
		{"dollar", HashPolicy{{Header: "h", Rewrite: rw(`b`, `$1`)}}, [][2]string{{"h", "abc"}}, x("a$1c"), true},
		// The hot keys' cut: the last bits replaced by a mark.
		{"cut", HashPolicy{{Header: "h", Rewrite: rw(`[01]{5}$`, `-`)}}, [][2]string{{"h", "01101100"}}, x("011-"), true},
		// Not terminal, then terminal: rotate the first, xor the second.
		{"key then spread", HashPolicy{{Header: "k"}, {Header: "s", Rewrite: rw(`[01]{6}$`, `-`), Terminal: true}},
			[][2]string{{"k", "acme"}, {"s", "10111111"}}, (x("acme")<<1 | x("acme")>>63) ^ x("10-"), true},
		// A missing header is skipped: the key's own hash.
		{"key without spread", HashPolicy{{Header: "k"}, {Header: "s", Rewrite: rw(`[01]{6}$`, `-`), Terminal: true}},
			[][2]string{{"k", "acme"}}, x("acme"), true},
	} {
		got, ok := tc.p.Hash(&Request{Path: "/", Headers: tc.headers})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range [][2]string{{`(`, ``}, {`a`, `\1`}, {`(a)`, `\q`}} {
		if _, err := NewRewrite(bad[0], bad[1]); err == nil {
			t.Errorf("NewRewrite(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
