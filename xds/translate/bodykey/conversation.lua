
-- Conversation keys (package bodykey's Conversation).

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
