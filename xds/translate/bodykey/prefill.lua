-- The prefill replica of a request, for prefill/decode disaggregation:
-- the first key of PREFILL_KEYS the request carries picks a slot of the
-- table kvxds serves in the route's metadata (under this filter's name:
-- "hosts", the prefill replicas, and "slots", three hex digits per slot
-- naming a host by its index from 0; "hot", the prefill pool's hot keys
-- as "index:value" = spread), and PREFILL_HEADER gets that replica's
-- host:port. A request without a key gets a random slot. A
-- request whose declared body is shorter than MIN_BODY, or a route
-- without a table, gets no header: the decode replica prefills it.
-- The request's spread sub-key as SPREAD_BITS characters '0' and '1':
-- PREFILL_SPREAD carries them (set by the prefill keys filter), or, with
-- SPREAD_RAW, carries the value they are the spread of; nil if absent.
local function spread_bits(headers)
  if PREFILL_SPREAD == nil then return nil end
  local s = headers:get(PREFILL_SPREAD)
  if s == nil or s == "" then return nil end
  if SPREAD_RAW then s = spread(keyhash(s)) end
  if #s ~= SPREAD_BITS or find(s, "[^01]") then return nil end
  return s
end

local function set_prefill(handle, headers)
  if MIN_BODY > 0 then
    local n = tonumber(headers:get("content-length"))
    if n == nil or n < MIN_BODY then return end
  end
  local md = handle:metadata()
  if md == nil then return end
  local hosts, slots = md:get("hosts"), md:get("slots")
  if type(hosts) ~= "table" or type(slots) ~= "string" or #slots ~= 3 * SLOTS then return end
  local v, idx
  for _, k in ipairs(PREFILL_KEYS) do
    v, idx = headers:get(k.header), k.index
    if v ~= nil and v ~= "" then break end
    v = nil
  end
  local slot
  if v ~= nil then
    -- A hot key's conversations spread over its spread's slots: the
    -- value and the first log2(spread) bits of the spread sub-key.
    local hot = md:get("hot")
    local n = type(hot) == "table" and hot[idx .. ":" .. v] or nil
    if type(n) == "number" and n >= 2 then
      local bits = spread_bits(headers)
      if bits ~= nil then
        local level = 0
        while 2 ^ level < n do level = level + 1 end
        v = v .. "#" .. sub(bits, 1, level)
      end
    end
    slot = tonumber(sub(keyhash(v), 1, 8), 16) % SLOTS
  else
    slot = math.random(0, SLOTS - 1)
  end
  local i = tonumber(sub(slots, 3 * slot + 1, 3 * slot + 3), 16)
  local host = i and hosts[i + 1]
  if type(host) == "string" then headers:replace(PREFILL_HEADER, host) end
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- A client must not pick its own prefill replica.
  headers:remove(PREFILL_HEADER)
  local ok, err = pcall(set_prefill, handle, headers)
  if not ok then
    handle:logWarn("kvxds prefill: " .. tostring(err))
  end
end
