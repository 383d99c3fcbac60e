package bodykey

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed prefill.lua
var prefillScript string

// hashStart begins script.lua's keyhash, which the prefill script shares.
const hashStart = "-- Hash (package bodykey) of s, as 16 hex digits"

// Prefill is how a decode pool's Lua filter names a request's prefill
// replica (LuaPrefill).
type Prefill struct {
	// Keys are the request headers that carry the prefill pool's keys,
	// in chain order: a header key's own header, a body key's generated
	// header (set by a filter before this one).
	Keys []PrefillKey
	// SpreadHeader carries a request's spread sub-key: SpreadBits
	// characters (a body key's generated header) or, with SpreadRaw, a
	// value whose Spread they are (a header key). "" for none.
	SpreadHeader string
	SpreadRaw    bool
	// Header receives the prefill replica's host:port; the script removes
	// any the client sent. "" with Override.
	Header string
	// Override, instead of naming the replica in a header, makes it the
	// request's upstream host (Envoy's setUpstreamOverrideHost, not
	// strict: a host the cluster lacks or holds unhealthy leaves the
	// choice to the cluster's own balancer). A hash pool's own table
	// picks its replica this way (bounded on prompt bytes).
	Override bool
	// MinBody: a request declaring a shorter body gets no header.
	MinBody int
	// Slots is the number of slots of the table.
	Slots int
	// AdapterHeader names a request's LoRA adapter (set by the body keys
	// filter before this one), "" for a pool without adapters: a request
	// naming one of the table's adapters picks among its replicas.
	AdapterHeader string
	// UntilEnd counts each request against its replica until its end,
	// not until its response body starts: a pool serving LoRA adapters,
	// where a request decoding holds its adapter's slot, and the requests
	// that have not started are mostly those waiting for a slot, which a
	// request whose adapter runs there passes (vLLM's scheduler skips
	// them). Counted until the first token, those waits alone made the
	// load, and the bound sent requests away from where their adapter
	// runs (measured on the multi-LoRA benchmark: hit rate 0.80 against
	// 0.84, swap-ins 204–213 per 1,000 against 192–200). With
	// NameComputed it names none, and still removes any a client sent.
	UntilEnd bool
	// NameComputed: the pool's load log reports its requests to kvxds,
	// and the script names, on each request, the earlier requests whose
	// prompts were computed since (ComputedHeader).
	NameComputed bool
}

// ComputedHeader is where a filter with NameComputed names, on a
// request, the x-request-ids (comma-separated, at most MaxComputed) of
// earlier requests of its Lua state whose prompts were computed since (a
// pool's own: its response body started; a prefill replica's: the decode
// replica's response started). The load log carries it to kvxds, whose
// figures then stop counting them; Envoy's upstream log marks no first
// token. The filter replaces any a client sent.
const ComputedHeader = "x-kvxds-computed"

// WentHeader is where a filter with NameComputed tells kvxds, through
// the load log, where a request placed by its key (by slot, with a
// bound) went: the first eight hex digits of the key's hash, followed,
// where the filter sent it away from its slot's replica, by "+" if to the
// replica its key's last request went to and by "*" if past the bound
// (WentAway). kvxds serves
// back the keys last sent away, and where, in the table's "went", so
// that every Envoy sends a key's next request where its prefix was last
// computed. The filter replaces any a client sent.
const WentHeader = "x-kvxds-went"

// WentAway splits a WentHeader value into the key's hash, whether the
// request went away from its slot's replica, and whether it followed its
// key there.
func WentAway(v string) (key string, away, followed bool) {
	if k, ok := strings.CutSuffix(v, "+"); ok {
		return k, true, true
	}
	if k, ok := strings.CutSuffix(v, "*"); ok {
		return k, true, false
	}
	return v, false, false
}

// MaxComputed bounds the ids one request names in ComputedHeader; a
// request computed past it is not named, and counts until its end.
const MaxComputed = 16

// PrefillKey is one key of the prefill pool's chain: the header carrying
// it and its index in the chain.
type PrefillKey struct {
	Header string
	Index  int
}

// LuaPrefill returns the source of the Envoy Lua filter that names a
// request's prefill replica in p.Header (or, with p.Override, makes it
// the request's upstream host), from the table in its route's
// metadata (under the filter's name: "hosts" and "slots", "hot" and
// "balance"). With "balance" it counts its Lua state's requests in flight
// per prefill replica until envoy_on_response, which it also defines.
func LuaPrefill(p Prefill) (string, error) {
	switch {
	case p.Header == "" && !p.Override:
		return "", fmt.Errorf("prefill: no header")
	case p.Header != "" && p.Override:
		return "", fmt.Errorf("prefill: a header and an override")
	case p.Slots <= 0:
		return "", fmt.Errorf("prefill: %d slots", p.Slots)
	case p.MinBody < 0:
		return "", fmt.Errorf("prefill: negative body minimum %d", p.MinBody)
	}
	h := strings.Index(script, hashStart)
	e := strings.Index(script, handlerStart)
	if h < 0 || e < h {
		return "", fmt.Errorf("script.lua: no keyhash to share")
	}
	var b strings.Builder
	b.WriteString("-- kvxds: the prefill replica of a request (generated).\n")
	b.WriteString("local find, sub, byte, format, floor = string.find, string.sub, string.byte, string.format, math.floor\n")
	fmt.Fprintf(&b, "local HASH_SEED1, HASH_SEED2 = 0x%x, 0x%x\nlocal HASH_MUL1, HASH_MUL2 = 0x%x, 0x%x\nlocal HASH_ROT1, HASH_ROT2 = %d, %d\n",
		hashSeed1, hashSeed2, hashMul1, hashMul2, hashRot1, hashRot2)
	header := "nil"
	if !p.Override {
		header = luaString(p.Header)
	}
	fmt.Fprintf(&b, "local PREFILL_HEADER = %s\nlocal MIN_BODY = %d\nlocal SLOTS = %d\nlocal SPREAD_BITS = %d\n",
		header, p.MinBody, p.Slots, SpreadBits)
	fmt.Fprintf(&b, "local ADAPTER_HEADER = %s\n", luaStringOrNil(strings.ToLower(p.AdapterHeader)))
	fmt.Fprintf(&b, "local UNTIL_END = %v\n", p.UntilEnd)
	if p.NameComputed {
		fmt.Fprintf(&b, "local COMPUTED_HEADER, MAX_COMPUTED, WENT_HEADER = %s, %d, %s\n", luaString(ComputedHeader), MaxComputed, luaString(WentHeader))
	} else {
		b.WriteString("local COMPUTED_HEADER, MAX_COMPUTED, WENT_HEADER = nil, 0, nil\n")
	}
	if p.SpreadHeader != "" {
		fmt.Fprintf(&b, "local PREFILL_SPREAD, SPREAD_RAW = %s, %v\n", luaString(strings.ToLower(p.SpreadHeader)), p.SpreadRaw)
	} else {
		b.WriteString("local PREFILL_SPREAD, SPREAD_RAW = nil, false\n")
	}
	b.WriteString("local PREFILL_KEYS = {\n")
	for _, k := range p.Keys {
		fmt.Fprintf(&b, "  {header = %s, index = %d},\n", luaString(strings.ToLower(k.Header)), k.Index)
	}
	b.WriteString("}\n\n")
	b.WriteString(script[h:e])
	b.WriteString(spreadScript)
	b.WriteString(prefillScript)
	return b.String(), nil
}

// PrefillSlot is the slot of a key's value in a table of n slots, as the
// prefill script computes it: the first 32 bits of Hash(v) modulo n. For
// a hot key, v is fleet.PrefillSlotKey's.
func PrefillSlot(v string, n int) int {
	x, _ := strconv.ParseUint(Hash([]byte(v))[:8], 16, 32)
	return int(x % uint64(n))
}

// PrefillSlotKey is the value whose hash picks a request's slot, as the
// prefill script computes it: its key's value, and for a hot key of the
// table with spread sub-key bits (SpreadBits characters '0' and '1'), the
// value, '#' and the first log2(spread) bits.
func PrefillSlotKey(value string, spread int, bits string) string {
	if spread < 2 || !ValidSpread(bits) {
		return value
	}
	level := 0
	for 1<<level < spread {
		level++
	}
	return value + "#" + bits[:min(level, SpreadBits)]
}

// luaStringOrNil is s as a Lua string, or nil if empty.
func luaStringOrNil(s string) string {
	if s == "" {
		return "nil"
	}
	return luaString(s)
}
