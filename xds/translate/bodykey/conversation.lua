
-- Conversation keys (package bodykey's Conversation). They scan the whole
-- body, and the scanner above finds bytes with Lua patterns (about 10 ns a
-- byte under LuaJIT) and hashes in floating point (about 20 ns a byte).
-- A filter with a conversation key swaps in the functions below for every
-- key: they jump between quotes with plain finds (memchr) and hash with
-- 32-bit bit operations, and give the same results.

-- Index after the string whose opening quote is at i, or nil: a quote ends
-- it unless an odd run of backslashes precedes it.
local function fast_skip_string(s, i)
  local j = i + 1
  while true do
    local k = find(s, '"', j, true)
    if k == nil then return nil end
    local b = k - 1
    while b > i and byte(s, b) == 92 do b = b - 1 end
    if (k - 1 - b) % 2 == 0 then return k + 1 end
    j = k + 1
  end
end

local literal_end = skip_value
-- skip_value, counting brackets only between strings.
local function fast_skip_value(s, i)
  local c = byte(s, i)
  if c == 34 then return fast_skip_string(s, i) end
  if c ~= 123 and c ~= 91 then return literal_end(s, i) end
  local depth, j = 0, i
  while true do
    local q = find(s, '"', j, true)
    for p = j, (q or #s + 1) - 1 do
      local d = byte(s, p)
      if d == 123 or d == 91 then
        depth = depth + 1
      elseif d == 125 or d == 93 then
        depth = depth - 1
        if depth == 0 then return p + 1 end
      end
    end
    if q == nil then return nil end
    j = fast_skip_string(s, q)
    if j == nil then return nil end
  end
end
skip_string, skip_value = fast_skip_string, fast_skip_value

if bit ~= nil and bit.tobit ~= nil then
  local bxor, tobit, tohex = bit.bxor, bit.tobit, bit.tohex
  local INV32 = 1 / TWO32
  -- fnv1a64 with h = hi * 2^32 + lo, lo a signed 32-bit integer: the
  -- products stay below 2^42, exact in a double, and tobit reduces them.
  fnv1a64 = function(s)
    local hi, lo = 0xcbf29ce4 + 1, tobit(0x84222325)
    for i = 1, #s do
      lo = bxor(lo, byte(s, i))
      local l = lo * 0x1b3
      local nl = tobit(l)
      hi = tobit(hi * 0x1b3 + (l - nl) * INV32 + lo * 256)
      lo = nl
    end
    if lo < 0 then hi = hi - 1 end
    return tohex(hi) .. tohex(lo)
  end
end

-- The values of the top-level "messages", "system" and "prompt" (first
-- occurrences, or false), or nil unless the body is one complete object.
local function top_fields(s)
  local i = object(s)
  if i == nil then return nil end
  local m, sy, p = false, false, false
  i = skip_ws(s, i + 1)
  if i == nil then return nil end
  if byte(s, i) == 125 then return m, sy, p end
  while true do
    if byte(s, i) ~= 34 then return nil end
    local e = skip_string(s, i)
    if e == nil then return nil end
    local key = sub(s, i + 1, e - 2)
    i = skip_ws(s, e)
    if i == nil or byte(s, i) ~= 58 then return nil end
    i = skip_ws(s, i + 1)
    if i == nil then return nil end
    if key == "messages" then m = m or i
    elseif key == "system" then sy = sy or i
    elseif key == "prompt" then p = p or i end
    i = skip_value(s, i)
    if i == nil then return nil end
    i = skip_ws(s, i)
    if i == nil then return nil end
    if byte(s, i) == 125 then return m, sy, p end
    if byte(s, i) ~= 44 then return nil end
    i = skip_ws(s, i + 1)
    if i == nil then return nil end
  end
end

-- Index after the first element of the array opening at a whose "role" is
-- "user", or nil; every element before it must be an object.
local function leading_end(s, a)
  local i = skip_ws(s, a + 1)
  while i ~= nil and byte(s, i) == 123 do
    local e = skip_value(s, i)
    if e == nil then return nil end
    local r = find_key(s, i, "role")
    if r ~= nil and sub(s, r, r + 5) == '"user"' then return e end
    i = skip_ws(s, e)
    if i == nil or byte(s, i) ~= 44 then return nil end
    i = skip_ws(s, i + 1)
  end
  return nil
end

-- s[a, b) as keyed: whole, or its first and last CONV_WINDOW bytes and its
-- length when longer than twice that.
local function window(s, a, b)
  if b - a <= 2 * CONV_WINDOW then return sub(s, a, b - 1) end
  return sub(s, a, a + CONV_WINDOW - 1) .. sub(s, b - CONV_WINDOW, b - 1) .. "#" .. format("%d", b - a)
end

-- The bytes a conversation key hashes: the leading messages (and a
-- top-level system prompt), or a completions prompt's first user turn.
local function conversation(s)
  local m, sy, p = top_fields(s)
  if m == nil then return nil end
  if m then
    if byte(s, m) ~= 91 then return nil end
    local e = leading_end(s, m)
    if e == nil then return nil end
    local out = window(s, m, e)
    if sy then out = window(s, sy, skip_value(s, sy)) .. "," .. out end
    return out
  end
  if not p or byte(s, p) ~= 34 then return nil end
  local pe = skip_string(s, p)
  for _, mk in ipairs(TURN_MARKERS) do
    local u = find(s, mk[1], p, true)
    if u ~= nil and u + #mk[1] <= pe then
      local t = find(s, mk[2], u + #mk[1], true)
      if t ~= nil and t + #mk[2] <= pe then return window(s, p, t + #mk[2]) end
    end
  end
  return nil
end
