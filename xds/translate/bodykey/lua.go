package bodykey

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed script.lua
var script string

//go:embed conversation.lua
var conversationScript string

// A filter with a conversation key gets conversationScript before the
// request handler, and a dispatch that knows the key; filters without
// one are the plain script.
const (
	handlerStart = "local function set_keys("
	dispatch     = "    if k.prefix ~= nil then b = prompt_prefix(s, k.prefix) else b = json_field(s, k.path) end\n"
	convDispatch = "    if k.conversation then b = conversation(s)\n" +
		"    elseif k.prefix ~= nil then b = prompt_prefix(s, k.prefix) else b = json_field(s, k.path) end\n"
	setHeader       = "    if b ~= nil then headers:replace(k.header, keyhash(b)) end\n"
	spreadSetHeader = "    if b ~= nil then\n" +
		"      local v = keyhash(b)\n" +
		"      if k.spread then v = spread(v) end\n" +
		"      headers:replace(k.header, v)\n" +
		"    end\n"
	// spreadScript is Spread of a Hash value: its first two hex digits
	// as SpreadBits characters '0' and '1', most significant first.
	spreadScript = "-- Spread (package bodykey) of a key hash: its first two hex digits as\n" +
		"-- 8 characters '0' and '1', most significant bit first.\n" +
		"local function spread(h)\n" +
		"  local v, out = tonumber(sub(h, 1, 2), 16), {}\n" +
		"  for i = 8, 1, -1 do\n" +
		"    out[i] = v % 2\n" +
		"    v = floor(v / 2)\n" +
		"  end\n" +
		"  return table.concat(out)\n" +
		"end\n\n"
	// onRequestStart starts the request handler, the script's last
	// function; a filter with a spread key ends with spreadOnRequest
	// instead.
	onRequestStart = "function envoy_on_request(handle)\n"
)

// spreadOnRequest is the request handler of a filter with a spread key:
// it drops every generated header the client sent, as the plain one
// does, but keeps a well-formed spread sub-key (ValidSpread) the client
// sent for when the body gives none.
var spreadOnRequest = `-- A spread header value a client sent, if well-formed (ValidSpread in
-- package bodykey): ` + strconv.Itoa(SpreadBits) + ` characters '0' and '1'.
local function spread_sent(v)
  if v ~= nil and #v == ` + strconv.Itoa(SpreadBits) + ` and not find(v, "[^01]") then return v end
  return nil
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- A client must not pick its own key: drop any copies it sent. Its
  -- spread sub-key, if well-formed, stands when the body gives none: it
  -- picks only among its own hot key's spread positions.
  local sent = {}
  for _, k in ipairs(KEYS) do
    if k.spread then sent[k.header] = spread_sent(headers:get(k.header)) end
    headers:remove(k.header)
  end
  local ok, err = pcall(set_keys, handle, headers)
  if not ok then
    handle:logWarn("kvxds body keys: " .. tostring(err))
  end
  for _, k in ipairs(KEYS) do
    local v = sent[k.header]
    if v ~= nil and headers:get(k.header) == nil then headers:replace(k.header, v) end
  end
end
`

// Key is one body key of a pool's chain, as the Lua script computes it:
// exactly one of JSONField, PromptPrefix and Conversation is set.
type Key struct {
	// Header is the request header the script sets to the key's value
	// (Hash of the keyed bytes), after removing any the client sent.
	Header string
	// JSONField is a dot path of object keys; PromptPrefix a byte count.
	JSONField    string
	PromptPrefix int
	// Conversation keys on the leading messages (Conversation).
	Conversation bool
	// Spread sets Header to the Spread of the keyed bytes rather than to
	// their Hash: the spread sub-key of a pool with hot keys.
	Spread bool
}

// Lua returns the source of the Envoy Lua filter that sets each key's
// header from the request body. It reads the body only when the request
// declares a content-length from 1 to maxBody bytes, so that it never
// buffers more than maxBody bytes; other requests go on without any of
// these headers. Every header of keys is removed from the request first,
// whether or not a value replaces it, except a spread key's header that
// the client sent well-formed (ValidSpread): it stays when the body gives
// no spread sub-key.
func Lua(keys []Key, maxBody int) (string, error) { return LuaAdapter(keys, maxBody, nil) }

// Adapter is the body field naming a request's LoRA adapter, which the
// script copies into a header when it names one.
type Adapter struct {
	// Header receives the field's value; Rejected the reason the field
	// names no adapter (AdapterRejections), when it is present but not a
	// name. The script removes both from the request first.
	Header, Rejected string
	// Field is a top-level JSON field ("model").
	Field string
	// BaseModels are values that mean "no adapter": no header is set.
	BaseModels []string
	// MaxName is the longest name copied, in bytes.
	MaxName int
}

// Reasons the script gives, in the Rejected header, for an adapter field
// that names no adapter.
const (
	RejectNotString = "not_string"    // null, a number, an object, or not JSON
	RejectEmpty     = "empty"         // ""
	RejectTooLong   = "too_long"      // longer than MaxName
	RejectBadByte   = "not_printable" // whitespace, control, non-ASCII or an escape
)

// AdapterRejections are the reasons, in order.
var AdapterRejections = []string{RejectNotString, RejectEmpty, RejectTooLong, RejectBadByte}

// adapterScript defines set_adapter, which the request handler calls on
// the body: the field's string value as written between its quotes.
const adapterScript = `-- The adapter named by the body's top-level ADAPTER.field, copied into
-- ADAPTER.header when it is 1 to ADAPTER.max printable ASCII bytes without
-- whitespace or escapes and not a base model; a present field that names
-- nothing sets ADAPTER.reject to the reason instead. Never an error.
local function set_adapter(s, headers)
  local top = object(s)
  if top == nil then return end
  local v = find_key(s, top, ADAPTER.field)
  if v == nil then return end
  local reason
  local e = byte(s, v) == 34 and skip_string(s, v) or nil
  if e == nil then
    reason = "not_string"
  else
    local name = sub(s, v + 1, e - 2)
    if #name == 0 then
      reason = "empty"
    elseif #name > ADAPTER.max then
      reason = "too_long"
    elseif find(name, "[^\33-\126]") or find(name, "\\", 1, true) then
      reason = "not_printable"
    elseif not ADAPTER.base[name] then
      headers:replace(ADAPTER.header, name)
    end
  end
  if reason ~= nil then headers:replace(ADAPTER.reject, reason) end
end

`

// Where the adapter's parts go in the script.
const (
	bodyRead    = "  local s = body:getBytes(0, n)\n"
	setKeysCall = "  local ok, err = pcall(set_keys, handle, headers)\n"
)

// LuaAdapter is Lua with the adapter field a copied into its header too
// (a nil a: Lua). A request whose body the script does not read (no
// content-length, or above maxBody) gets no adapter header.
func LuaAdapter(keys []Key, maxBody int, a *Adapter) (string, error) {
	if maxBody <= 0 {
		return "", fmt.Errorf("body limit %d is not positive", maxBody)
	}
	var b strings.Builder
	b.WriteString("-- kvxds: hash keys from the JSON request body (generated).\n")
	fmt.Fprintf(&b, "local MAX_BODY = %d\n", maxBody)
	b.WriteString("local PROMPT_FIELDS = {")
	for i, f := range PromptFields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(luaString(f))
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "local HASH_SEED1, HASH_SEED2 = 0x%x, 0x%x\nlocal HASH_MUL1, HASH_MUL2 = 0x%x, 0x%x\nlocal HASH_ROT1, HASH_ROT2 = %d, %d\n",
		hashSeed1, hashSeed2, hashMul1, hashMul2, hashRot1, hashRot2)
	conv, spread := false, false
	for _, k := range keys {
		conv = conv || k.Conversation
		spread = spread || k.Spread
	}
	if conv {
		fmt.Fprintf(&b, "local CONV_WINDOW = %d\nlocal TURN_MARKERS = {\n", ConversationWindow)
		for _, m := range TurnMarkers {
			fmt.Fprintf(&b, "  {%s, %s},\n", luaString(m[0]), luaString(m[1]))
		}
		b.WriteString("}\n")
	}
	b.WriteString("local KEYS = {\n")
	for _, k := range keys {
		sources := 0
		for _, set := range []bool{k.JSONField != "", k.PromptPrefix != 0, k.Conversation} {
			if set {
				sources++
			}
		}
		switch {
		case k.Header == "":
			return "", fmt.Errorf("body key without a header")
		case sources != 1:
			return "", fmt.Errorf("body key %s: set exactly one of json_field, prompt_prefix and conversation", k.Header)
		case k.PromptPrefix < 0:
			return "", fmt.Errorf("body key %s: negative prompt_prefix %d", k.Header, k.PromptPrefix)
		}
		sp := ""
		if k.Spread {
			sp = ", spread = true"
		}
		switch {
		case k.Conversation:
			fmt.Fprintf(&b, "  {header = %s, conversation = true%s},\n", luaString(k.Header), sp)
		case k.PromptPrefix > 0:
			fmt.Fprintf(&b, "  {header = %s, prefix = %d%s},\n", luaString(k.Header), k.PromptPrefix, sp)
		default:
			segs := strings.Split(k.JSONField, ".")
			for i, s := range segs {
				if s == "" {
					return "", fmt.Errorf("body key %s: json_field %q has an empty segment", k.Header, k.JSONField)
				}
				segs[i] = luaString(s)
			}
			fmt.Fprintf(&b, "  {header = %s, path = {%s}%s},\n", luaString(k.Header), strings.Join(segs, ", "), sp)
		}
	}
	b.WriteString("}\n")
	if a != nil {
		if a.Header == "" || a.Rejected == "" || a.Field == "" || a.MaxName <= 0 {
			return "", fmt.Errorf("adapter field: header, rejection header, field and name limit are required")
		}
		fmt.Fprintf(&b, "local ADAPTER = {header = %s, reject = %s, field = %s, max = %d, base = {",
			luaString(a.Header), luaString(a.Rejected), luaString(a.Field), a.MaxName)
		for i, m := range a.BaseModels {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "[%s] = true", luaString(m))
		}
		b.WriteString("}}\n")
	}
	b.WriteString("\n")
	if !conv && !spread && a == nil {
		b.WriteString(script)
		return b.String(), nil
	}
	h := strings.Index(script, handlerStart)
	if h < 0 || strings.Count(script, dispatch) != 1 || strings.Count(script, setHeader) != 1 ||
		strings.Count(script, bodyRead) != 1 {
		return "", fmt.Errorf("script.lua: no request handler to extend")
	}
	b.WriteString(script[:h])
	handler := script[h:]
	if conv {
		b.WriteString(strings.TrimPrefix(conversationScript, "\n"))
		b.WriteString("\n")
		handler = strings.Replace(handler, dispatch, convDispatch, 1)
	}
	if spread {
		b.WriteString(spreadScript)
		handler = strings.Replace(handler, setHeader, spreadSetHeader, 1)
		o := strings.Index(handler, onRequestStart)
		if o < 0 || strings.Count(handler, onRequestStart) != 1 {
			return "", fmt.Errorf("script.lua: no request handler to replace")
		}
		handler = handler[:o] + spreadOnRequest
	}
	// After the spread handler, which replaces envoy_on_request: the
	// adapter headers a client sent go before the keys are set, in
	// either handler.
	if a != nil {
		if strings.Count(handler, setKeysCall) != 1 {
			return "", fmt.Errorf("script.lua: no call of set_keys to precede")
		}
		b.WriteString(adapterScript)
		handler = strings.Replace(handler, bodyRead, bodyRead+"  set_adapter(s, headers)\n", 1)
		handler = strings.Replace(handler, setKeysCall,
			"  headers:remove(ADAPTER.header)\n  headers:remove(ADAPTER.reject)\n"+setKeysCall, 1)
	}
	b.WriteString(handler)
	return b.String(), nil
}

// luaString quotes s as a Lua 5.1 string literal: printable ASCII as is,
// every other byte as a decimal escape.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "\\%03d", c)
	}
	b.WriteByte('"')
	return b.String()
}

// HeaderPrefix starts the header of every body key: the key at index i
// (from 0) of a pool's chain sets Header(i).
const HeaderPrefix = "x-kvxds-key-"

// Header is the request header of the body key at index i (from 0) of a
// chain: x-kvxds-key-<i+1>.
func Header(i int) string { return HeaderPrefix + strconv.Itoa(i+1) }
