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

-- FNV-1a 64 over s, as 16 hex digits: h = hi * 2^32 + lo, and the prime
-- is 2^40 + 0x1b3, so h * prime = lo * 0x1b3 + 2^32 * (hi * 0x1b3 + carry
-- + lo * 2^8) mod 2^64.
local TWO32 = 4294967296
local fnv1a64
if bit ~= nil and bit.tobit ~= nil then
  local bxor, tobit, tohex = bit.bxor, bit.tobit, bit.tohex
  local INV32 = 1 / TWO32
  -- lo a signed 32-bit integer: the products stay below 2^42, exact in a
  -- double, and tobit reduces them.
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
else
  -- Without bit (plain Lua 5.1): both halves held in doubles as unsigned
  -- integers, every intermediate exact below 2^53.
  local bxor = function(a, b) -- a < 2^32, b < 256: only the low byte changes
    local lo, r, p = a % 256, 0, 1
    for _ = 1, 8 do
      if (lo % 2) ~= (b % 2) then r = r + p end
      lo, b, p = floor(lo / 2), floor(b / 2), p * 2
    end
    return a - a % 256 + r
  end
  fnv1a64 = function(s)
    local hi, lo = 0xcbf29ce4, 0x84222325
    for i = 1, #s do
      lo = bxor(lo, byte(s, i)) % TWO32
      local l = lo * 0x1b3
      local carry = floor(l / TWO32)
      hi = (hi * 0x1b3 + carry + lo * 256) % TWO32
      lo = l % TWO32
    end
    return format("%08x%08x", hi, lo)
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
    if b ~= nil then headers:replace(k.header, fnv1a64(b)) end
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
