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
func Lua(keys []Key, maxBody int) (string, error) {
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
	b.WriteString("}\n\n")
	if !conv && !spread {
		b.WriteString(script)
		return b.String(), nil
	}
	h := strings.Index(script, handlerStart)
	if h < 0 || strings.Count(script, dispatch) != 1 || strings.Count(script, setHeader) != 1 {
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
