-- The prefill replica of a request, for prefill/decode disaggregation:
-- the first key of PREFILL_KEYS the request carries picks a slot of the
-- table kvxds serves in the route's metadata (under this filter's name:
-- "hosts", the prefill replicas, and "slots", three hex digits per slot
-- naming a host by its index from 0), and PREFILL_HEADER gets that
-- replica's host:port. A request without a key gets a random slot. A
-- request whose declared body is shorter than MIN_BODY, or a route
-- without a table, gets no header: the decode replica prefills it.
local function set_prefill(handle, headers)
  if MIN_BODY > 0 then
    local n = tonumber(headers:get("content-length"))
    if n == nil or n < MIN_BODY then return end
  end
  local md = handle:metadata()
  if md == nil then return end
  local hosts, slots = md:get("hosts"), md:get("slots")
  if type(hosts) ~= "table" or type(slots) ~= "string" or #slots ~= 3 * SLOTS then return end
  local v
  for _, h in ipairs(PREFILL_KEYS) do
    v = headers:get(h)
    if v ~= nil and v ~= "" then break end
    v = nil
  end
  local slot
  if v ~= nil then
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
