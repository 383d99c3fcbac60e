package bodykey

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
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
