package bodykey

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The prefill script picks, for every key, the host the Go mirror
// (PrefillSlot) picks from the same table; it sets no header below the
// body minimum or without a table, drops the one a client sent, and
// gives a request without a key some host of the table.
func TestLuaPrefillMatchesGo(t *testing.T) {
	bin := luajit(t)
	const slots = 64
	hosts := []string{"10.0.1.1:8000", "10.0.1.2:8000", "[fd00::3]:8000"}
	var enc strings.Builder
	table := make([]int, slots)
	for s := range table {
		table[s] = (s * 7 / 3) % len(hosts)
		fmt.Fprintf(&enc, "%03x", table[s])
	}
	const header = "x-prefiller-host-port"
	src, err := LuaPrefill(Prefill{Keys: []PrefillKey{{"x-kvxds-prefill-key-1", 0}, {"X-Session-Id", 2}}, Header: header, MinBody: 100, Slots: slots,
		SpreadHeader: "x-kvxds-prefill-spread"})
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		line string // content-length, then headers
		want string // a host, "-" for none, "*" for any host
	}
	var cases []tc
	for i := range 300 {
		v := fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15)
		cases = append(cases, tc{"500\tx-kvxds-prefill-key-1=" + v, hosts[table[PrefillSlot(v, slots)]]})
	}
	for _, v := range []string{"alice", "conversation-42", "ü"} {
		// The second key when the first is absent.
		cases = append(cases, tc{"500\tx-session-id=" + v, hosts[table[PrefillSlot(v, slots)]]})
	}
	cases = append(cases,
		tc{"500\tx-kvxds-prefill-key-1=abc\tx-session-id=zzz", hosts[table[PrefillSlot("abc", slots)]]},
		tc{"99\tx-session-id=alice", "-"},        // below the minimum
		tc{"-\tx-session-id=alice", "-"},         // no content-length
		tc{"99\t" + header + "=10.9.9.9:1", "-"}, // a client's pick is dropped
		tc{"500\t" + header + "=10.9.9.9:1\tx-session-id=b", hosts[table[PrefillSlot("b", slots)]]},
		tc{"500", "*"}, // no key: some host
	)
	// Hot keys: "hotprefix" of key 0 spread over 4, "hotsession" of key
	// 2 over 2; a request of one picks its slot by the value and the
	// first bits of its spread sub-key, without a sub-key by the value.
	slotKey := func(v, bits string, n int) string { return PrefillSlotKey(v, n, bits) }
	for _, bits := range []string{"00000000", "01000000", "10110000", "11111111"} {
		cases = append(cases,
			tc{"500\tx-kvxds-prefill-key-1=hotprefix\tx-kvxds-prefill-spread=" + bits, hosts[table[PrefillSlot(slotKey("hotprefix", bits, 4), slots)]]},
			tc{"500\tx-session-id=hotsession\tx-kvxds-prefill-spread=" + bits, hosts[table[PrefillSlot(slotKey("hotsession", bits, 2), slots)]]},
			// The same value as another key's is not hot.
			tc{"500\tx-session-id=hotprefix\tx-kvxds-prefill-spread=" + bits, hosts[table[PrefillSlot("hotprefix", slots)]]},
		)
	}
	cases = append(cases,
		tc{"500\tx-kvxds-prefill-key-1=hotprefix", hosts[table[PrefillSlot("hotprefix", slots)]]},
		tc{"500\tx-kvxds-prefill-key-1=hotprefix\tx-kvxds-prefill-spread=0101", hosts[table[PrefillSlot("hotprefix", slots)]]},
	)
	write := tempWriter(t)
	scriptPath := write("prefill.lua", src)
	var lines []string
	for _, c := range cases {
		lines = append(lines, c.line)
	}
	casePath := write("cases", strings.Join(lines, "\n")+"\n")
	run := func(tablePath string) []string {
		out, err := exec.Command(bin, "testdata/prefill_standin.lua", scriptPath, tablePath, casePath, header).CombinedOutput()
		if err != nil {
			t.Fatalf("luajit: %v\n%s", err, out)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(got) != len(cases) {
			t.Fatalf("luajit printed %d lines for %d cases:\n%s", len(got), len(cases), out)
		}
		return got
	}
	got := run(write("table", enc.String()+"\n"+strings.Join(hosts, "\n")+"\nhot\t0:hotprefix\t4\nhot\t2:hotsession\t2\n"))
	for i, c := range cases {
		switch {
		case c.want == "*":
			if !strings.Contains(strings.Join(hosts, " "), got[i]) || got[i] == "-" {
				t.Errorf("case %q: got %q, want a host of the table", c.line, got[i])
			}
		case got[i] != c.want:
			t.Errorf("case %q: got %q, want %q", c.line, got[i], c.want)
		}
	}
	// A route without the table: no header, whatever the request.
	for i, g := range run(write("none", "-\n")) {
		if g != "-" {
			t.Errorf("without a table, case %q: got %q, want no header", cases[i].line, g)
		}
	}
}

func TestLuaPrefillErrors(t *testing.T) {
	for _, p := range []Prefill{
		{Slots: 8},
		{Header: "x-p", Slots: 0},
		{Header: "x-p", Slots: 8, MinBody: -1},
	} {
		if _, err := LuaPrefill(p); err == nil {
			t.Errorf("LuaPrefill(%+v): no error", p)
		}
	}
}

func TestPrefillSlotKey(t *testing.T) {
	for _, tc := range []struct {
		value  string
		spread int
		bits   string
		want   string
	}{
		{"k", 4, "10110000", "k#10"},
		{"k", 2, "10110000", "k#1"},
		{"k", 256, "10110000", "k#10110000"},
		{"k", 0, "10110000", "k"}, // not hot
		{"k", 4, "", "k"},         // no sub-key: the key's home
		{"k", 4, "1011", "k"},     // malformed sub-key
	} {
		if got := PrefillSlotKey(tc.value, tc.spread, tc.bits); got != tc.want {
			t.Errorf("PrefillSlotKey(%q, %d, %q) = %q, want %q", tc.value, tc.spread, tc.bits, got, tc.want)
		}
	}
}

// With a balance factor in the table, each Lua state bounds its requests
// in flight per replica as Envoy's hash_balance_factor bounds a hash
// table's: a keyed request whose replica has more in flight than
// ceil(share × ceil((total+1) × factor / 100)) goes to the replica of
// the next slots that has not, and envoy_on_response releases it. With
// "bytes" in the table it bounds prompt bytes instead: a request of w
// bytes, over max(share × (total+w) × factor / 100, w); a body of
// undeclared length weighs the mean of those in flight. A script of
// requests of many lengths and responses over a few keys, some never
// answered and forgotten ten minutes on, runs under LuaJIT and under the
// same rule written here, named in the prefill header and as a pool's
// own upstream override host.
func TestLuaPrefillBounded(t *testing.T) {
	for _, mode := range []struct {
		name                          string
		bytes, fleet, adapter, cached bool
	}{
		{"requests", false, false, false, false}, {"bytes", true, false, false, false}, {"fleet_bytes", true, true, false, false},
		{"adapters", true, false, true, false}, {"fleet_adapters", true, true, true, false},
		{"bytes_cached", true, false, false, true}, {"fleet_bytes_cached", true, true, false, true},
	} {
		t.Run(mode.name, func(t *testing.T) { testLuaPrefillBounded(t, mode.bytes, mode.fleet, mode.adapter, mode.cached) })
	}
}

// testLuaPrefillBounded runs the script on requests, responses and clock
// steps against the rule in Go. With fleet, table pushes bring the
// fleet's bytes in flight ("load"): a replica's bytes are then the
// table's plus this state's requests since it, those started within
// load_lag ms of the table's arrival included; a table older than its
// load_ttl is not believed, and the state's own counts bound. With
// adapter, requests name LoRA adapters, two of them in the table's
// "adapters": such a request takes the host this state sent its key to
// last, if that is one of the candidates below, under the bound, and one
// of the adapter's replicas that can run it at once or a host running it
// with fewer adapters in flight than its slots; else the first of its
// adapter's replicas, in rendezvous order of its key and their addresses, then of the rest
// of its ranking, that is under the bound and can run the adapter at
// once (it is in flight there, or fewer adapters are than the host's
// "adapter_slots") and is one of its replicas or has it in flight, else
// the first under the bound unless one under it has backlogMove fewer
// adapters in flight beyond its slots (then the one with the fewest),
// else the first, its bound adapterFactor times the pool's; the others
// pick by slot, going first to the host this state sent their key to
// last while it is under the bound. In flight are the table's "running" and this
// state's requests since it, or without a table this state's own. With
// cached, the table carries each host's prefix-cache hit rate in
// sixteenths c ("cached"): the bound weighs a host's bytes, in it and in
// all, by (16 - c)/16, and the request's own in its cap, never in its
// floor.
func testLuaPrefillBounded(t *testing.T, bytes, fleet, adapter, cached bool) {
	bin := luajit(t)
	// backlogMove and adapterFactor are the script's BACKLOG_MOVE and
	// ADAPTER_FACTOR.
	const slots, factor, backlogMove, adapterFactor = 64, 150, 3, 5
	hosts := []string{"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000", "10.0.1.4:8000", "10.0.1.5:8000"}
	var enc strings.Builder
	table := make([]int, slots)
	share := make([]int, len(hosts))
	for s := range table {
		table[s] = (s * 7 / 3) % len(hosts)
		share[table[s]]++
		fmt.Fprintf(&enc, "%03x", table[s])
	}
	// The rule: requests or bytes in flight per host and in all, from
	// request to response (bytes in the same float64 arithmetic as
	// LuaJIT's numbers).
	inflight := map[int]float64{}
	total, count := 0.0, 0
	// The fleet's table (nil before the first) and this state's bytes
	// since it: fresh, by host, of the requests of generation gen.
	var gl []float64
	fresh, gen := map[int]float64{}, 0
	// When the table in use was counted, less its lag: the state's
	// memories of where keys went older than that yield to the table.
	wentSince := 0
	// Each host's hit rate in sixteenths, and the share of its bytes it
	// still computes: one host cold, one all but fully cached.
	hits := []int{0, 15, 8, 12, 4}
	miss := make([]float64, len(hosts))
	for i, c := range hits {
		miss[i] = float64(16-c) / 16
	}
	over := func(i int, w float64, factor int) bool {
		if !bytes {
			capacity := ((count+1)*factor + 99) / 100
			return inflight[i] > float64(max((capacity*share[i]+slots-1)/slots, 1))
		}
		load, all := inflight[i], total
		if gl != nil {
			load, all = gl[i]+fresh[i], 0
			for _, v := range gl {
				all += v
			}
			for _, v := range fresh {
				all += v
			}
		}
		cw := w
		if cached {
			// In hosts order, as the script sums.
			bytesOf := func(j int) float64 {
				if gl != nil {
					return gl[j] + fresh[j]
				}
				return inflight[j]
			}
			all = 0
			for j := range hosts {
				all += bytesOf(j) * miss[j]
			}
			load, cw = load*miss[i], w*miss[i]
		}
		capacity := (all + cw) * float64(factor) / 100
		return load > max(capacity*float64(share[i])/slots, w)
	}
	// The adapters' replicas and rankings, the hosts' adapter slots, the
	// table's adapters in flight (while it is believed), and this state's
	// requests in flight by host and adapter (own), and fresh.
	type entry struct{ members, rank []int }
	adapters := map[string]entry{"sql": {[]int{0, 2}, []int{3, 1}}, "chat": {[]int{4}, []int{1, 0, 2}}}
	aslots := []int{1, 2, 1, 3, 1}
	var gRun []map[string]bool
	ownAd, freshAd := map[int]map[string]int{}, map[int]map[string]int{}
	countAd := func(m map[int]map[string]int, i int, name string, d int) {
		if name == "" {
			return
		}
		if m[i] == nil {
			m[i] = map[string]int{}
		}
		if m[i][name] += d; m[i][name] <= 0 {
			delete(m[i], name)
		}
	}
	runs := func(j int, name string) (ok, running bool, backlog int) {
		var g map[string]bool
		mine := ownAd[j]
		if gl != nil {
			mine = freshAd[j]
			if gRun != nil {
				g = gRun[j]
			}
		}
		if g[name] || mine[name] > 0 {
			return true, true, 0
		}
		n := len(g)
		for a := range mine {
			if !g[a] {
				n++
			}
		}
		return n < aslots[j], false, n - aslots[j]
	}
	bySlots, byBacklog := 0, 0
	// Where this state sent each key last (every host holds slots here),
	// and how many requests went back there rather than to their slot's
	// host.
	type memory struct{ host, ms int }
	went, byWent, byAdapterWent, byAdapterSpare := map[string]memory{}, 0, 0, 0
	score := func(key string, j int) uint64 {
		x, _ := strconv.ParseUint(Hash([]byte(key + "\x00" + hosts[j]))[:8], 16, 32)
		return x
	}
	pick := func(key, name string, w float64) int {
		if e, ok := adapters[name]; ok {
			cands := slices.Clone(e.members)
			slices.SortFunc(cands, func(a, b int) int {
				return cmp.Or(cmp.Compare(score(key, b), score(key, a)), cmp.Compare(a, b))
			})
			cands = append(cands, e.rank...)
			// Back where the key went last: one of the adapter's
			// replicas that runs it at once, or a host running it with
			// a slot to spare.
			if m, ok := went[key]; ok && m.host != cands[0] {
				if k := slices.Index(cands, m.host); k >= 0 && !over(m.host, w, factor*adapterFactor) {
					ok, running, _ := runs(m.host, name)
					_, _, spare := runs(m.host, "\x00")
					switch {
					case ok && k < len(e.members):
						byAdapterWent++
						return m.host
					case running && spare < 0:
						byAdapterSpare++
						return m.host
					}
				}
			}
			under, uBacklog, least, fewest := -1, 0, -1, 0
			for k, j := range cands {
				if !over(j, w, factor*adapterFactor) {
					ok, running, backlog := runs(j, name)
					if ok && (k < len(e.members) || running) {
						if under >= 0 {
							bySlots++
						}
						return j
					}
					if under < 0 {
						under, uBacklog = j, backlog
					}
					if least < 0 || backlog < fewest {
						least, fewest = j, backlog
					}
				}
			}
			if under >= 0 && uBacklog-fewest >= backlogMove {
				byBacklog++
				return least
			}
			if under >= 0 {
				return under
			}
			return cands[0]
		}
		s := PrefillSlot(key, slots)
		i := table[s]
		// A believed table (with no "went": every key went home) wins
		// over memories older than it.
		if e, ok := went[key]; ok && (gl == nil || e.ms > wentSince) && e.host != i && !over(e.host, w, factor) {
			j := e.host
			byWent++
			return j
		}
		if !over(i, w, factor) {
			return i
		}
		seen := map[int]bool{i: true}
		for k := 1; k < slots; k++ {
			j := table[(s+k)%slots]
			if !seen[j] {
				seen[j] = true
				if !over(j, w, factor) {
					return j
				}
			}
		}
		return i
	}
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"alice", "bob", "carol", "dave", "erin"}
	var lines, want []string
	// Requests awaiting a response by number (from 1): their host and
	// start. A tenth never get one (their client went away): the script
	// forgets them MAX_OPEN (600 s) after they started, when it next
	// looks (every 256 requests), as this rule does.
	type pending struct {
		host, start int
		w           float64
		ms, gen     int
		ad          string
	}
	open := map[int]pending{}
	lost := map[int]bool{}
	release := func(n int) {
		if p, ok := open[n]; ok {
			delete(open, n)
			inflight[p.host] -= p.w
			total -= p.w
			count--
			countAd(ownAd, p.host, p.ad, -1)
			if gl != nil && p.gen == gen {
				fresh[p.host] -= p.w
				countAd(freshAd, p.host, p.ad, -1)
			}
		}
	}
	const lag, ttl = 100, 700
	clock, requests, spilled, expired, ms := 0, 0, 0, 0, 0
	// The table the route carries (its figures, when it was counted and
	// its number; nil before the first), and the number of the one the
	// state bounds by (0: its own counts).
	type loadTable struct {
		load   []float64
		run    []map[string]bool
		at, id int
	}
	var served *loadTable
	inUse, stale := 0, 0
	for step := range 1500 {
		if fleet {
			ms += rng.IntN(40)
			lines = append(lines, fmt.Sprintf("ms\t%d", ms))
			if step%60 == 30 {
				tb := &loadTable{load: make([]float64, len(hosts)), at: ms, id: step + 1}
				parts := make([]string, len(hosts))
				for i := range tb.load {
					tb.load[i] = float64(rng.IntN(400_000))
					parts[i] = fmt.Sprint(tb.load[i])
				}
				served = tb
				lines = append(lines, fmt.Sprintf("load\t%s\t%d\t%d\t%d", strings.Join(parts, ","), lag, tb.at, ttl))
				if adapter {
					// Each host's adapters in flight, from none to more
					// than its slots.
					tb.run = make([]map[string]bool, len(hosts))
					run := make([]string, len(hosts))
					for i := range hosts {
						tb.run[i] = map[string]bool{}
						var names []string
						for _, a := range []string{"sql", "chat", "law", "med"} {
							if rng.IntN(3) == 0 {
								tb.run[i][a] = true
								names = append(names, a)
							}
						}
						run[i] = strings.Join(names, ",")
					}
					lines = append(lines, "running\t"+strings.Join(run, "/"))
				}
				continue
			}
		}
		if step%150 == 149 {
			clock += 250
			lines = append(lines, fmt.Sprintf("clock\t%d", clock))
			continue
		}
		if len(open) > 0 && rng.IntN(3) == 0 {
			var waiting []int
			for n := range open {
				if !lost[n] {
					waiting = append(waiting, n)
				}
			}
			if len(waiting) > 0 {
				slices.Sort(waiting)
				n := waiting[rng.IntN(len(waiting))]
				lines = append(lines, fmt.Sprintf("respond\t%d", n))
				release(n)
				continue
			}
		}
		// Mostly one hot key, so that its replica overflows.
		key := keys[0]
		if rng.IntN(2) == 0 {
			key = keys[rng.IntN(len(keys))]
		}
		// Prompts from 200 bytes to 40 kB, a tenth up to 2 MB (longer
		// than all in flight: an idle replica takes it whatever its
		// share); a twentieth of undeclared length.
		length := fmt.Sprint(200 + rng.IntN(40_000))
		if rng.IntN(10) == 0 {
			length = fmt.Sprint(100_000 + rng.IntN(1_900_000))
		}
		w, _ := strconv.ParseFloat(length, 64)
		if rng.IntN(20) == 0 {
			length, w = "-", 1
			if count > 0 {
				w = total / float64(count)
			}
		}
		if !bytes {
			w = 1
		}
		switch believed := served != nil && ms-served.at <= ttl; {
		case believed && inUse != served.id:
			// The first request after a push reads it: this state's
			// requests of the last lag ms count on top of it.
			gl, gRun, inUse = served.load, served.run, served.id
			wentSince = served.at - lag
			gen++
			fresh, freshAd = map[int]float64{}, map[int]map[string]int{}
			for n, p := range open {
				if ms-p.ms <= lag {
					fresh[p.host] += p.w
					countAd(freshAd, p.host, p.ad, 1)
					p.gen = gen
					open[n] = p
				}
			}
		case !believed && inUse != 0:
			gl, gRun, inUse = nil, nil, 0
			gen++
			stale++
		}
		// Of an adapter's requests, some name one the table does not
		// place (they pick by slot).
		name := ""
		if adapter {
			name = []string{"", "sql", "sql", "chat", "other", "law", "med", "tax"}[rng.IntN(8)]
		}
		i := pick(key, name, w)
		went[key] = memory{i, ms}
		if i != table[PrefillSlot(key, slots)] {
			spilled++
		}
		requests++
		if requests%256 == 0 {
			for n, p := range open {
				if clock-p.start > 600 {
					release(n)
					expired++
				}
			}
		}
		p := pending{host: i, start: clock, w: w, ms: ms, ad: name}
		countAd(ownAd, i, name, 1)
		if gl != nil {
			p.gen = gen
			fresh[i] += w
			countAd(freshAd, i, name, 1)
		}
		open[requests] = p
		inflight[i] += w
		total += w
		count++
		lost[requests] = rng.IntN(10) == 0
		line := length + "\tx-session-id=" + key
		if name != "" {
			line += "\tx-kvxds-adapter=" + name
		}
		lines = append(lines, line)
		want = append(want, hosts[i])
	}
	if expired == 0 {
		t.Fatal("no request expired: the script does not test forgetting")
	}
	if fleet && stale == 0 {
		t.Fatal("no table went stale: the script does not test load_ttl")
	}
	if adapter && bySlots == 0 {
		t.Fatal("no request passed a replica for want of a slot: the script does not test adapter_slots")
	}
	if adapter && byBacklog == 0 {
		t.Fatal("no request left a replica where adapters wait for slots: the script does not test BACKLOG_MOVE")
	}
	// Without the fleet's table this state's own few adapters in flight
	// seldom leave a slot to spare on a host they overflow to.
	if adapter && (byAdapterWent == 0 || fleet && byAdapterSpare == 0) {
		t.Fatalf("adapter requests went back to where their key went last %d times to one of its replicas, %d to a host with a slot to spare: the script does not test both",
			byAdapterWent, byAdapterSpare)
	}
	if byWent == 0 {
		t.Fatal("no request went back to where its key went last: the script does not test it")
	}
	if spilled == 0 || spilled > requests*9/10 {
		t.Fatalf("the script spills %d of %d requests: it tests nothing", spilled, requests)
	}
	write := tempWriter(t)
	md := enc.String() + "\n" + strings.Join(hosts, "\n") + fmt.Sprintf("\nbalance\t%d\n", factor)
	if bytes {
		md += "bytes\n"
	}
	if cached {
		md += "cached\t"
		for _, c := range hits {
			md += fmt.Sprintf("%x", c)
		}
		md += "\n"
	}
	if adapter {
		md += "adapter_slots\t"
		for _, n := range aslots {
			md += fmt.Sprintf("%03x", n)
		}
		md += "\n"
		for name, e := range adapters {
			md += "adapter\t" + name + "\t"
			for _, j := range e.members {
				md += fmt.Sprintf("%03x", j)
			}
			md += "|"
			for _, j := range e.rank {
				md += fmt.Sprintf("%03x", j)
			}
			md += "\n"
		}
	}
	table_ := write("table", md)
	cases := write("cases", strings.Join(lines, "\n")+"\n")
	// The same choices named in the prefill header, or made the upstream
	// host (not strict) by a hash pool's own table.
	for _, mode := range []struct {
		p      Prefill
		header string
	}{
		{Prefill{Header: "x-prefiller-host-port"}, "x-prefiller-host-port"},
		{Prefill{Override: true}, ":override"},
	} {
		t.Run(mode.header, func(t *testing.T) {
			p := mode.p
			p.Keys, p.Slots = []PrefillKey{{"x-session-id", 0}}, slots
			if adapter {
				p.AdapterHeader = "x-kvxds-adapter"
			}
			src, err := LuaPrefill(p)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table_, cases, mode.header).CombinedOutput()
			if err != nil {
				t.Fatalf("luajit: %v\n%s", err, out)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(got) != len(want) {
				t.Fatalf("luajit printed %d lines for %d requests:\n%s", len(got), len(want), out)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("request %d: got %s, want %s (then %d more to compare)", i+1, got[i], want[i], len(want)-i-1)
				}
			}
		})
	}
}

// tempWriter returns a function that writes a file of a fresh temporary
// directory and returns its path.
func tempWriter(t *testing.T) func(name, content string) string {
	dir := t.TempDir()
	return func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// A request without a key naming a placed adapter (of a pool whose keyless
// route goes to the pool's replicas) goes to one of the adapter's
// replicas, not to the cluster; one naming no placed adapter is left to
// the cluster.
func TestLuaPickAdapterKeyless(t *testing.T) {
	bin := luajit(t)
	hosts := []string{"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000"}
	write := tempWriter(t)
	table := write("table", strings.Repeat("001", 64)+"\n"+strings.Join(hosts, "\n")+"\nbalance\t200\nbytes\nadapter\tsql\t000002|001\n")
	cases := write("cases", strings.Repeat("500\tx-kvxds-adapter=sql\n", 40)+"500\tx-kvxds-adapter=other\n")
	src, err := LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Override: true, Slots: 64, AdapterHeader: "x-kvxds-adapter"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, cases, ":override").CombinedOutput()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	seen := map[string]int{}
	for _, h := range got[:len(got)-1] {
		seen[h]++
	}
	if len(seen) != 2 || seen[hosts[0]] == 0 || seen[hosts[2]] == 0 || got[len(got)-1] != "-" {
		t.Errorf("keyless requests went to %v, then %s; want both of sql's replicas %s and %s, then none", seen, got[len(got)-1], hosts[0], hosts[2])
	}
}

// A pool's own pick filter counts a request against its replica until the
// response body's first chunk (the engine streams its first token once
// the prompt is computed), not until the body ends: a replica decoding
// many replies while computing no prompt is not overloaded. Two
// requests of one key go to its replica; while they are in flight a
// third is passed over to another (bytes bound 150, this state's own
// counts); once their first chunks came, though their bodies go on, the
// third stays; once they ended too, as well. In a pool serving adapters
// (UntilEnd) a request counts until its end: while their bodies go on,
// the third is passed over.
func TestLuaPickReleasesAtFirstChunk(t *testing.T) {
	for _, untilEnd := range []bool{false, true} {
		t.Run(fmt.Sprintf("until end %v", untilEnd), func(t *testing.T) { testLuaPickReleases(t, untilEnd) })
	}
}

func testLuaPickReleases(t *testing.T, untilEnd bool) {
	bin := luajit(t)
	hosts := []string{"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000"}
	write := tempWriter(t)
	table := write("table", strings.Repeat("000001002", 64/3)+"000"+"\n"+strings.Join(hosts, "\n")+"\nbalance\t150\nbytes\n")
	src, err := LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Override: true, Slots: 64, UntilEnd: untilEnd})
	if err != nil {
		t.Fatal(err)
	}
	// The slot of key k: its home replica.
	key, home := "", ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("s%d", i)
		if PrefillSlot(k, 64)%3 == 0 && PrefillSlot(k, 64) < 63 {
			key, home = k, hosts[0]
		}
	}
	req := "1000\tx-session-id=" + key + "\n"
	for _, tc := range []struct {
		name, between string
		stays         bool
	}{
		{"in flight", "", false},
		{"first chunks came", "first\t1\nfirst\t2\n", !untilEnd},
		{"ended", "first\t1\nfirst\t2\nend\t1\nend\t2\n", true},
		{"answered without chunks", "respond\t1\nrespond\t2\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cases := write("cases", req+req+tc.between+req)
			out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, cases, ":override").CombinedOutput()
			if err != nil {
				t.Fatalf("luajit: %v\n%s", err, out)
			}
			got := strings.Fields(string(out))
			if len(got) != 3 {
				t.Fatalf("luajit printed %q, want 3 hosts", got)
			}
			for i := range 2 {
				if got[i] != home {
					t.Fatalf("request %d went to %s, want its key's replica %s", i+1, got[i], home)
				}
			}
			if stays := got[2] == home; stays != tc.stays {
				t.Errorf("the third request went to %s (its key's replica %s): stays %v, want %v", got[2], home, stays, tc.stays)
			}
		})
	}
}

// A pool's pick filter whose pool reports its load names, on the next
// request through its Lua state,
// the x-request-ids of its requests whose response body started since
// (at most MaxComputed; the rest count until their end), so that kvxds's
// figures stop counting them too; it removes any a client sent, and names
// none for a request that ended without one.
func TestLuaPickNamesComputed(t *testing.T) {
	bin := luajit(t)
	hosts := []string{"10.0.1.1:8000", "10.0.1.2:8000"}
	write := tempWriter(t)
	table := write("table", strings.Repeat("000001", 32)+"\n"+strings.Join(hosts, "\n")+"\nbalance\t150\nbytes\n")
	src, err := LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Override: true, Slots: 64, NameComputed: true})
	if err != nil {
		t.Fatal(err)
	}
	var lines, want []string
	add := func(line, w string) {
		lines = append(lines, line)
		if w != "" {
			want = append(want, w)
		}
	}
	add("1000\tx-session-id=a\tx-request-id=r1", "-")
	add("1000\tx-session-id=b\tx-request-id=r2\tx-kvxds-computed=forged", "-")
	add("first\t1", "")
	add("first\t2", "")
	add("1000\tx-request-id=r3", "r1,r2") // keyless: not counted, but it carries them
	add("1000\tx-session-id=c\tx-request-id=r4", "-")
	add("end\t1", "")
	add("respond\t4", "") // r4 ended without a chunk: its end entry says so
	add("1000\tx-session-id=d\tx-request-id=r5", "-")
	var ids []string
	for i := range MaxComputed + 1 {
		add(fmt.Sprintf("1000\tx-session-id=s%d\tx-request-id=q%d", i, i), "-")
		ids = append(ids, fmt.Sprintf("q%d", i))
	}
	for i := range MaxComputed + 1 {
		add(fmt.Sprintf("first\t%d", 6+i), "")
	}
	add("1000\tx-request-id=n1", strings.Join(ids[:MaxComputed], ","))
	add("1000\tx-request-id=n2", "-")
	out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, write("cases", strings.Join(lines, "\n")+"\n"), ComputedHeader).CombinedOutput()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("%s per request:\n%q\nwant\n%q", ComputedHeader, got, want)
	}
	// A pool serving adapters counts its requests until their end: it
	// names none, and still removes a client's.
	src, err = LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Override: true, Slots: 64, NameComputed: true, UntilEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, write("cases", "1000\tx-session-id=a\tx-request-id=r1\nfirst\t1\n1000\tx-session-id=b\tx-request-id=r2\tx-kvxds-computed=forged\nend\t1\n1000\tx-request-id=r3\n"), ComputedHeader).CombinedOutput()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, out)
	}
	if got, want := strings.Fields(string(out)), []string{"-", "-", "-"}; !slices.Equal(got, want) {
		t.Errorf("counting until the end: %s per request %q, want %q", ComputedHeader, got, want)
	}
	// A decode pool's prefill filter names its requests once the decode
	// replica's response starts (the prefill is done), where its pool's
	// load log reports them; where it does not, it names none, and a
	// client's header passes untouched.
	for _, tc := range []struct {
		name bool
		want []string
	}{{true, []string{"-", "r1"}}, {false, []string{"-", "r9"}}} {
		src, err = LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Header: "x-prefiller-host-port", Slots: 64, NameComputed: tc.name})
		if err != nil {
			t.Fatal(err)
		}
		out, err = exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, write("cases", "1000\tx-session-id=a\tx-request-id=r1\nrespond\t1\n1000\tx-session-id=a\tx-request-id=r2\tx-kvxds-computed=r9\n"), ComputedHeader).CombinedOutput()
		if err != nil {
			t.Fatalf("luajit: %v\n%s", err, out)
		}
		if got := strings.Fields(string(out)); !slices.Equal(got, tc.want) {
			t.Errorf("prefill filter, naming %v: %s per request %q, want %q", tc.name, ComputedHeader, got, tc.want)
		}
	}
}

// TestLuaPickWent: a keyed request goes where the table's "went" says
// its key's last request went, away from its slot's replica, while that
// replica is under the bound and the table is newer than the state's own
// memory of the key; a key the table does not name goes to its slot's
// replica. The filter tells kvxds where each key went (WentHeader: the
// hash's first eight hex digits, "*" when away) and removes any a client
// sent.
// pickSessions is a pick filter on x-session-id over four hosts holding
// 64 slots in turn, and its table file bounding prompt bytes at factor.
func pickSessions(t *testing.T, write func(name, text string) string, factor int) (hosts []string, table, src string) {
	t.Helper()
	hosts = []string{"10.0.1.1:8000", "10.0.1.2:8000", "10.0.1.3:8000", "10.0.1.4:8000"}
	var slots strings.Builder
	for s := range 64 {
		fmt.Fprintf(&slots, "%03x", s%len(hosts))
	}
	table = write("table", slots.String()+"\n"+strings.Join(hosts, "\n")+fmt.Sprintf("\nbalance\t%d\nbytes\n", factor))
	src, err := LuaPrefill(Prefill{Keys: []PrefillKey{{"x-session-id", 0}}, Override: true, Slots: 64, NameComputed: true})
	if err != nil {
		t.Fatal(err)
	}
	return hosts, table, src
}

func TestLuaPickWent(t *testing.T) {
	bin := luajit(t)
	write := tempWriter(t)
	hosts, table, src := pickSessions(t, write, 150)
	home := PrefillSlot("a", 64) % len(hosts)
	away := (home + 1) % len(hosts)
	kh := Hash([]byte("a"))[:8]
	load := func(at int, bytes string) string {
		return fmt.Sprintf("ms\t%d\nload\t%s\t0\t%d\t100000", at, bytes, at)
	}
	var lines, want []string
	add := func(line, host, went string) {
		lines = append(lines, line)
		if host != "" {
			want = append(want, host+"|"+went)
		}
	}
	add(load(0, "0,0,0,0"), "", "")
	add("1000\tx-session-id=a", hosts[home], kh)
	add("1000\tx-kvxds-went=forged", "-", "-")
	// The fleet sent the key away since.
	add(fmt.Sprintf("went\t%s%03x", kh, away), "", "")
	add(load(10, "0,0,0,0"), "", "")
	add("1000\tx-session-id=a", hosts[away], kh+"+")
	// Home since: the table no longer names it.
	add("went\t-", "", "")
	add(load(20, "0,0,0,0"), "", "")
	add("1000\tx-session-id=a", hosts[home], kh)
	// Away again, but that replica is over the bound now.
	add(fmt.Sprintf("went\t%s%03x", kh, away), "", "")
	loads := []string{"0", "0", "0", "0"}
	loads[away] = "900000"
	add(load(30, strings.Join(loads, ",")), "", "")
	add("1000\tx-session-id=a", hosts[home], kh)
	// A host the table does not hold is none.
	add(fmt.Sprintf("went\t%s%03x", kh, 9), "", "")
	add(load(40, "0,0,0,0"), "", "")
	add("1000\tx-session-id=a", hosts[home], kh)
	out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, write("cases", strings.Join(lines, "\n")+"\n"), ":override+"+WentHeader).CombinedOutput()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("host|%s per request:\n%q\nwant\n%q", WentHeader, got, want)
	}
}

// A key no Envoy placed lately (neither the Lua state's memory nor the
// table's "seen" has it) is bounded at its slot's share of the mean; a
// key in "seen", or any key without a "seen", at the table's factor.
func TestLuaPickNewKey(t *testing.T) {
	bin := luajit(t)
	write := tempWriter(t)
	hosts, table, src := pickSessions(t, write, 250)
	// The set of 65,536 bits in hex with the bits of keys set, a key's
	// bit its hash's first four hex digits.
	seen := func(keys ...string) string {
		d := make([]byte, 1<<14)
		for _, k := range keys {
			var b int
			fmt.Sscanf(Hash([]byte(k))[:4], "%x", &b)
			d[b/4] |= 8 >> (b % 4)
		}
		for i, v := range d {
			d[i] = "0123456789abcdef"[v]
		}
		return string(d)
	}
	// Each key's slot's replica carries twice the others' bytes: within
	// 250% of its share of the mean, above 100%.
	load := func(k string) string {
		b := []string{"50000", "50000", "50000", "50000"}
		b[PrefillSlot(k, 64)%len(hosts)] = "100000"
		return fmt.Sprintf("load\t%s\t0\t0\t100000", strings.Join(b, ","))
	}
	home := func(k string) string { return hosts[PrefillSlot(k, 64)%len(hosts)] }
	next := func(k string) string { return hosts[(PrefillSlot(k, 64)+1)%len(hosts)] }
	kh := func(k string) string { return Hash([]byte(k))[:8] }
	var lines, want []string
	add := func(line, host, went string) {
		lines = append(lines, line)
		if host != "" {
			want = append(want, host+"|"+went)
		}
	}
	// No "seen": every key keeps the factor.
	add(load("a"), "", "")
	add("1000\tx-session-id=a", home("a"), kh("a"))
	// "seen" without key c: c is new, and leaves its busy replica.
	add("seen\t"+seen("a"), "", "")
	add(load("c"), "", "")
	add("1000\tx-session-id=c", next("c"), kh("c")+"*")
	// Key d is in "seen": it has a cache to keep.
	add("seen\t"+seen("d"), "", "")
	add(load("d"), "", "")
	add("1000\tx-session-id=d", home("d"), kh("d"))
	// Key a is not, but this Lua state placed it.
	add(load("a"), "", "")
	add("1000\tx-session-id=a", home("a"), kh("a"))
	// A "seen" of the wrong size is none.
	add("seen\t"+seen("a")[1:], "", "")
	add(load("e"), "", "")
	add("1000\tx-session-id=e", home("e"), kh("e"))
	out, err := exec.Command(bin, "testdata/prefill_standin.lua", write("prefill.lua", src), table, write("cases", strings.Join(lines, "\n")+"\n"), ":override+"+WentHeader).CombinedOutput()
	if err != nil {
		t.Fatalf("luajit: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("host|%s per request:\n%q\nwant\n%q", WentHeader, got, want)
	}
}
