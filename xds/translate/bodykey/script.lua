-- The scanner below is the same as package bodykey's Go code, so that
-- clients can compute these keys ahead (Lua 5.1 as Envoy embeds it: LuaJIT).

local find, sub, byte, format, floor = string.find, string.sub, string.byte, string.format, math.floor

-- Index of the first non-whitespace byte at or after i, or nil.
local function skip_ws(s, i)
  return (find(s, "[^ \t\n\r]", i))
end

-- Index after the string whose opening quote is at i, or nil.
local function skip_string(s, i)
  local j = i + 1
  while true do
    local k = find(s, '["\\]', j)
    if k == nil then return nil end
    if byte(s, k) == 92 then -- backslash: skip the escaped byte
      j = k + 2
      if j > #s + 1 then return nil end
    else
      return k + 1
    end
  end
end

-- Index after the value starting at i, or nil. Nested brackets are
-- counted, not matched by kind.
local function skip_value(s, i)
  local c = byte(s, i)
  if c == 34 then return skip_string(s, i) end
  if c == 123 or c == 91 then
    local depth, j = 0, i
    while true do
      local k = find(s, '["{}%[%]]', j)
      if k == nil then return nil end
      local d = byte(s, k)
      if d == 34 then
        j = skip_string(s, k)
        if j == nil then return nil end
      else
        if d == 123 or d == 91 then depth = depth + 1 else depth = depth - 1 end
        if depth == 0 then return k + 1 end
        j = k + 1
      end
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

-- FNV-1a 64 over s, as 16 hex digits. The 64-bit state is two 32-bit
-- halves held in doubles, so every intermediate stays an exact integer
-- below 2^53 (Lua 5.1 numbers): the prime is 2^40 + 0x1b3, so
-- h * prime = lo * 0x1b3 + 2^32 * (hi * 0x1b3 + carry + lo * 2^8) mod 2^64.
local bxor = bit and bit.bxor
if bxor == nil then
  bxor = function(a, b) -- a < 2^32, b < 256: only the low byte changes
    local lo, r, p = a % 256, 0, 1
    for _ = 1, 8 do
      if (lo % 2) ~= (b % 2) then r = r + p end
      lo, b, p = floor(lo / 2), floor(b / 2), p * 2
    end
    return a - a % 256 + r
  end
end
local TWO32 = 4294967296
local function fnv1a64(s)
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
