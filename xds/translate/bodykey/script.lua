-- The scanner below is the same as package bodykey's Go code, so that
-- clients can compute these keys ahead (Lua 5.1 as Envoy embeds it: LuaJIT).

local find, sub, byte, format, floor = string.find, string.sub, string.byte, string.format, math.floor

-- Index of the first non-whitespace byte at or after i, or nil.
local function skip_ws(s, i)
  return (find(s, "[^ \t\n\r]", i))
end

-- Index after the string whose opening quote is at i, or nil: a quote ends
-- it unless an odd run of backslashes precedes it. Plain finds (memchr)
-- rather than patterns keep the scan near a nanosecond a byte.
local function skip_string(s, i)
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

-- Index after the value starting at i, or nil. Nested brackets are
-- counted between strings, not matched by kind.
local function skip_value(s, i)
  local c = byte(s, i)
  if c == 34 then return skip_string(s, i) end
  if c == 123 or c == 91 then
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
      j = skip_string(s, q)
      if j == nil then return nil end
    end
  end
  -- A number or a literal runs to the next delimiter.
  local k = find(s, "[ \t\n\r,}%]]", i) or #s + 1
  if k == i then return nil end
  return k
end

-- Index of the value of key in the object opening at i, or nil. Keys are
-- compared as written; the first occurrence wins.
local function find_key(s, i, key)
  i = skip_ws(s, i + 1)
  if i == nil or byte(s, i) == 125 then return nil end
  while true do
    if byte(s, i) ~= 34 then return nil end
    local e = skip_string(s, i)
    if e == nil then return nil end
    local match = sub(s, i + 1, e - 2) == key
    i = skip_ws(s, e)
    if i == nil or byte(s, i) ~= 58 then return nil end
    i = skip_ws(s, i + 1)
    if i == nil then return nil end
    if match then return i end
    i = skip_value(s, i)
    if i == nil then return nil end
    i = skip_ws(s, i)
    if i == nil or byte(s, i) ~= 44 then return nil end
    i = skip_ws(s, i + 1)
    if i == nil then return nil end
  end
end

-- Index of the '{' opening the body's top-level object, or nil.
local function object(s)
  local i = skip_ws(s, 1)
  if i == nil or byte(s, i) ~= 123 then return nil end
  return i
end

-- The bytes a json_field key hashes: the string's JSON text between its
-- quotes, or nil for a missing, non-string or empty value.
local function json_field(s, path)
  local i = object(s)
  if i == nil then return nil end
  for _, seg in ipairs(path) do
    if byte(s, i) ~= 123 then return nil end
    i = find_key(s, i, seg)
    if i == nil then return nil end
  end
  if byte(s, i) ~= 34 then return nil end
  local e = skip_string(s, i)
  if e == nil or e - i == 2 then return nil end
  return sub(s, i + 1, e - 2)
end

-- The bytes a prompt_prefix key hashes: the first n bytes of the raw JSON
-- text of the top-level "messages" value, else of "prompt"; nil unless it
-- is a non-empty array or string.
local function prompt_prefix(s, n)
  local top = object(s)
  if top == nil then return nil end
  local v
  for _, f in ipairs(PROMPT_FIELDS) do
    v = find_key(s, top, f)
    if v ~= nil then break end
  end
  if v == nil then return nil end
  local c, e = byte(s, v), nil
  if c == 34 then
    e = skip_string(s, v)
    if e == nil or e - v == 2 then return nil end
  elseif c == 91 then
    e = skip_value(s, v)
    if e == nil then return nil end
    local f = skip_ws(s, v + 1)
    if f == nil or byte(s, f) == 93 then return nil end
  else
    return nil
  end
  if e > v + n then e = v + n end
  return sub(s, v, e - 1)
end

-- Hash (package bodykey) of s, as 16 hex digits: two 32-bit lanes fold
-- in little-endian words, h = rotl((h xor w) * mul, rot). A product of a
-- 32-bit value and a multiplier below 2^19 is exact in a double, and
-- tobit reduces it mod 2^32.
local TWO32 = 4294967296
local keyhash
if bit ~= nil and bit.tobit ~= nil then
  local bxor, bor, lshift, rol, tobit, tohex = bit.bxor, bit.bor, bit.lshift, bit.rol, bit.tobit, bit.tohex
  local M1, M2, R1, R2 = HASH_MUL1, HASH_MUL2, HASH_ROT1, HASH_ROT2
  keyhash = function(s)
    local h1, h2 = tobit(HASH_SEED1), tobit(HASH_SEED2)
    local n = #s
    local i = 1
    while i + 3 <= n do
      local a, b, c, d = byte(s, i, i + 3)
      local w = bor(a, lshift(b, 8), lshift(c, 16), lshift(d, 24))
      h1 = rol(tobit(bxor(h1, w) * M1), R1)
      h2 = rol(tobit(bxor(h2, w) * M2), R2)
      i = i + 4
    end
    if i <= n then
      local w, sh = 0, 0
      for k = i, n do
        w = bor(w, lshift(byte(s, k), sh))
        sh = sh + 8
      end
      h1 = rol(tobit(bxor(h1, w) * M1), R1)
      h2 = rol(tobit(bxor(h2, w) * M2), R2)
    end
    h1, h2 = bxor(h1, n), bxor(h2, n)
    for _ = 1, 2 do
      h1 = rol(tobit(bxor(h1, h2) * M1), R1)
      h2 = rol(tobit(bxor(h2, h1) * M2), R2)
    end
    return tohex(h1) .. tohex(h2)
  end
else
  -- Without bit (plain Lua 5.1): unsigned 32-bit values in doubles, xor
  -- bit by bit; slow, and only a fallback (Envoy embeds LuaJIT).
  local function bxor(a, b)
    local r, p = 0, 1
    for _ = 1, 32 do
      local x, y = a % 2, b % 2
      if x ~= y then r = r + p end
      a, b, p = (a - x) / 2, (b - y) / 2, p * 2
    end
    return r
  end
  local function step(h, w, m, r)
    local x = (bxor(h, w) * m) % TWO32
    local hi = floor(x / 2 ^ (32 - r))
    return (x - hi * 2 ^ (32 - r)) * 2 ^ r + hi
  end
  local M1, M2, R1, R2 = HASH_MUL1, HASH_MUL2, HASH_ROT1, HASH_ROT2
  keyhash = function(s)
    local h1, h2 = HASH_SEED1, HASH_SEED2
    local n = #s
    for i = 1, n, 4 do
      local w, p = 0, 1
      for k = i, math.min(i + 3, n) do
        w = w + byte(s, k) * p
        p = p * 256
      end
      h1, h2 = step(h1, w, M1, R1), step(h2, w, M2, R2)
    end
    h1, h2 = bxor(h1, n), bxor(h2, n)
    for _ = 1, 2 do
      h1 = step(h1, h2, M1, R1)
      h2 = step(h2, h1, M2, R2)
    end
    return format("%08x%08x", h1, h2)
  end
end

local function set_keys(handle, headers)
  local declared = tonumber(headers:get("content-length"))
  if declared == nil or declared <= 0 or declared > MAX_BODY then
    return -- unknown or too long: never buffer beyond the limit
  end
  local body = handle:body()
  if body == nil then return end
  local n = body:length()
  if n == 0 or n > MAX_BODY then return end
  local s = body:getBytes(0, n)
  for _, k in ipairs(KEYS) do
    local b
    if k.prefix ~= nil then b = prompt_prefix(s, k.prefix) else b = json_field(s, k.path) end
    if b ~= nil then headers:replace(k.header, keyhash(b)) end
  end
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- A client must not pick its own key: drop any copies it sent.
  for _, k in ipairs(KEYS) do headers:remove(k.header) end
  local ok, err = pcall(set_keys, handle, headers)
  if not ok then
    handle:logWarn("kvxds body keys: " .. tostring(err))
  end
end
