-- The prefill replica of a request, for prefill/decode disaggregation:
-- the first key of PREFILL_KEYS the request carries picks a slot of the
-- table kvxds serves in the route's metadata (under this filter's name:
-- "hosts", the prefill replicas, and "slots", three hex digits per slot
-- naming a host by its index from 0; "hot", the prefill pool's hot keys
-- as "index:value" = spread), and PREFILL_HEADER gets that replica's
-- host:port. A request without a key gets a random slot. A request whose
-- declared body is shorter than MIN_BODY, or a route without a table,
-- gets no header: the decode replica prefills it.
-- Where PREFILL_HEADER is nil, the script picks a hash pool's own
-- replica: the slot's replica becomes the request's upstream host (not
-- strict: the cluster's balancer decides if its hosts lack it or hold it
-- unhealthy), and a request without a key is left to the cluster.
-- With "balance" in the metadata (the pool's balance_factor, in percent)
-- the choice is bounded as Envoy bounds a hash table's
-- (hash_balance_factor): a replica with more requests in flight from
-- this Lua state (one per Envoy worker) than its share of balance% of
-- their mean passes a keyed request to the replica of the next slots
-- that is not, so that a key's overflow goes to one other replica. With
-- "bytes" too (balance_on = "prompt_bytes") the bound counts the prompt
-- bytes in flight instead, this request's among them: prefill costs
-- what the prompt is long, and prompts may differ a hundredfold. With
-- "load" too (the bytes every Envoy logging to kvxds has in flight per
-- host, in hosts order, as one string) a replica's bytes are the
-- fleet's: the table's, plus what this Lua state sent since ("load_lag"
-- ms before the table arrived: the logs and the push take that long to
-- count a request), so that many Envoys, each with a small share of the
-- traffic, bound a replica by its whole load. With ADAPTER_HEADER (a
-- pool serving LoRA adapters), "adapters" maps each placed adapter to
-- its candidates (adapter_candidates): a request naming one goes to the
-- first of them under the bound where its adapter can run at once
-- (bounded_list, runs: "adapter_slots", each host's slots as three hex
-- digits, and "running", with the load, each host's adapters in flight),
-- else to the first under the bound. With "cached" (one hex digit per
-- host, in hosts order: its prefix-cache hit rate in sixteenths c) the
-- bytes bound weighs a host's bytes by (16 - c)/16, what it likely still
-- computes of them, and the fleet's the same way: a replica whose
-- requests hit its cache is not full for sending it prompts it mostly
-- holds. A table whose "load_at"
-- (ms since the epoch) is more than "load_ttl" ms old is not believed:
-- the state's own counts bound.
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

-- The weight (1, or bytes) of the requests this Lua state named a
-- replica for, in flight until their prompt is computed: a prefill
-- replica's until the decode replica's response starts, a pool's own
-- until its response body's first chunk (envoy_on_response), by replica
-- and in all (count requests); open holds each one's replica, weight and
-- start, so that a request whose response never comes (a client gone
-- first) stops counting after MAX_OPEN seconds.
local inflight, total, count, open, next_id = {}, 0, 0, {}, 0
-- This state's requests in flight by host and adapter, placed or not
-- (own), and those of them that are fresh.
local own_ad, fresh_ad = {}, {}
local MAX_OPEN = 600
local share_of, share_slots = nil, nil

-- The fleet's load (nil without one): the table's bytes by host and
-- their sum, and this state's requests since it (fresh: those whose
-- gen is the table's).
local load_str, gload, gtotal, fresh, ftotal, gen = nil, nil, 0, {}, 0, 0
-- The table's adapters in flight (nil without a load): by host, a set
-- and its size n.
local run_str, grun = nil, nil
-- For the request being placed: the share of each host's bytes it still
-- computes, from "cached" (nil without), and the fleet's bytes so
-- weighed (eall).
local miss, eall = nil, 0

local function count_ad(t, host, ad, d)
  local m = t[host]
  if m == nil then m = {}; t[host] = m end
  local c = (m[ad] or 0) + d
  if c <= 0 then m[ad] = nil else m[ad] = c end
end

-- Milliseconds since the epoch: Envoy's timestamp(), else os.time().
local function now_ms(handle)
  local ok, ms = pcall(handle.timestamp, handle)
  if ok and type(ms) == "number" then return ms end
  return os.time() * 1000
end

-- A new load string: parse it, and count as fresh this state's requests
-- that started within lag ms of now.
local function sync_load(s, run, hosts, lag, now)
  if s == nil then run = nil end
  if s == load_str and run == run_str then return end
  load_str, run_str, gen = s, run, gen + 1
  grun = nil
  if s == nil then gload = nil; return end
  if run ~= nil then
    grun = {}
    local i = 0
    for part in string.gmatch(run .. "\t", "([^\t]*)\t") do
      i = i + 1
      local h = hosts[i]
      if type(h) == "string" then
        local set, n = {}, 0
        for name in string.gmatch(part, "[^ ]+") do
          if not set[name] then set[name] = true; n = n + 1 end
        end
        grun[h] = {set = set, n = n}
      end
    end
  end
  gload, gtotal, fresh, ftotal, fresh_ad = {}, 0, {}, 0, {}
  local i = 0
  for v in string.gmatch(s, "[^,]+") do
    i = i + 1
    local h, n = hosts[i], tonumber(v)
    if type(h) == "string" and n ~= nil then
      gload[h] = n
      gtotal = gtotal + n
    end
  end
  for _, o in pairs(open) do
    if now - o.ms <= lag then
      if not o.computed then
        fresh[o.host] = (fresh[o.host] or 0) + o.w
        ftotal = ftotal + o.w
      end
      if o.ad ~= nil then count_ad(fresh_ad, o.host, o.ad, 1) end
      o.gen = gen
    end
  end
end

-- Request id's prompt is computed (its response body started, or it
-- ended): its weight stops counting. Its adapter, decoding, still holds
-- a slot until release.
local function computed(id)
  local o = open[id]
  if o == nil or o.computed then return nil end
  o.computed = true
  inflight[o.host] = inflight[o.host] - o.w
  total = total - o.w
  count = count - 1
  if o.gen == gen and gload ~= nil then
    fresh[o.host] = fresh[o.host] - o.w
    ftotal = ftotal - o.w
  end
  return o
end

-- The x-request-ids of this state's requests computed since its last
-- request, which names them (COMPUTED_HEADER) for kvxds's figures.
local pending = {}

-- Name request o (just computed) on this state's next request.
local function notice(o)
  if COMPUTED_HEADER ~= nil and o ~= nil and type(o.rid) == "string" and o.rid ~= "" and #pending < MAX_COMPUTED then
    pending[#pending + 1] = o.rid
  end
end

local function release(id)
  local o = open[id]
  if o == nil then return end
  computed(id)
  open[id] = nil
  if o.ad ~= nil then
    count_ad(own_ad, o.host, o.ad, -1)
    if o.gen == gen and gload ~= nil then count_ad(fresh_ad, o.host, o.ad, -1) end
  end
end

-- Forget requests open longer than MAX_OPEN, every 256 requests.
local function expire(now)
  if next_id % 256 ~= 0 then return end
  for id, o in pairs(open) do
    if now - o.t > MAX_OPEN then release(id) end
  end
end

-- Each host's slots (its weight in the bound), cached per table.
local function shares(slots)
  if share_slots ~= slots then
    local n = {}
    for s = 0, SLOTS - 1 do
      local i = tonumber(sub(slots, 3 * s + 1, 3 * s + 3), 16)
      if i ~= nil then n[i] = (n[i] or 0) + 1 end
    end
    share_of, share_slots = n, slots
  end
  return share_of
end

-- Each host's share of its bytes still to compute, from the "cached"
-- string s (nil: none, or not one digit per host). Read at each request,
-- not cached by s: a membership change may keep the string and change
-- the hosts it describes.
local function read_miss(s, hosts)
  if s == nil then return nil end
  local m = {}
  for i, h in ipairs(hosts) do
    local c = tonumber(sub(s, i, i), 16)
    if type(h) == "string" and c ~= nil then m[h] = (16 - math.min(c, 15)) / 16 end
  end
  return m
end

-- A host's bytes in flight: the table's and this state's fresh ones, or
-- without a table this state's own.
local function bytes_of(h)
  if gload ~= nil then return (gload[h] or 0) + (fresh[h] or 0) end
  return inflight[h] or 0
end

-- Whether host i (named h) is overloaded for a request of w bytes:
-- Envoy's hostOverloadFactor in bytes, its bytes in flight over its share
-- of (total + w) × factor/100, and never under w (an idle replica takes
-- any request); with w nil, in requests as Envoy counts them, over
-- ceil(share × ceil((total+1) × factor/100)).
local function overloaded(n, i, h, factor, w)
  if w == nil then
    local cap = floor(((total + 1) * factor + 99) / 100)
    return (inflight[h] or 0) > math.max(math.ceil(cap * (n[i] or 0) / SLOTS), 1)
  end
  local load, all, cw = bytes_of(h), total, w
  if gload ~= nil then all = gtotal + ftotal end
  if miss ~= nil then
    -- What is left to compute; the floor stays the request's whole
    -- prompt, what overflowing to a cold replica would compute.
    local m = miss[h] or 1
    load, all, cw = load * m, eall, w * m
  end
  local cap = (all + cw) * factor / 100
  return load > math.max(cap * (n[i] or 0) / SLOTS, w)
end

-- Where this state sent each key last (went[v]: the host and its index
-- in hosts, which a new membership may change), two generations of at
-- most WENT_MAX keys each, so that its memory stays bounded; keys longer
-- than WENT_KEY are not kept. A request goes back there while that host
-- holds slots and is under the bound, before its key's slot: a key that
-- overflowed to another replica computed its last prompt there, and its
-- next one hits there, not at its slot's replica (measured on Mooncake's
-- trace, docs/benchmarks/traces.md).
-- With the fleet's load, the table's "went" names where the keys that
-- every Envoy last sent away from their slot's replica went (eight hex
-- digits of the key's hash, then three of the host's index: gwent),
-- counted at went_since (ms): this state's own memory wins where it is
-- newer, and a key the table does not name went home since.
local WENT_MAX, WENT_KEY = 4096, 256
local went, went_old, went_n = {}, {}, 0
local went_str, gwent, went_since = nil, nil, 0
-- The table's "seen": the keys every Envoy placed lately (within ten
-- minutes), home or away, as 65,536 bits in hex, a key's bit the first
-- four hex digits of its hash (nil without a believed load).
local seen_str = nil
-- A key that no Envoy placed lately has no prefix cached anywhere, so
-- moving it costs no hit: it is bounded at its slot's share of the mean
-- (NEW_FACTOR), and the pool's factor, looser, is left to keys with a
-- cache to keep (measured on Mooncake's trace, where most requests open
-- a new conversation: docs/benchmarks/traces.md).
local NEW_FACTOR = 100

local function remember(v, host, j, ms)
  if v == nil or #v > WENT_KEY then return end
  local e = went[v]
  if e == nil then
    if went_n >= WENT_MAX then went_old, went, went_n = went, {}, 0 end
    went_n = went_n + 1
    e = {}
    went[v] = e
  end
  e.host, e.j, e.ms = host, j, ms
end

-- A new table: s its "went" ("" for none), nil without a believed load.
local function sync_went(s, since)
  went_since = since
  if s == went_str then return end
  went_str, gwent = s, nil
  if s == nil then return end
  gwent = {}
  for k = 1, #s - 10, 11 do
    local j = tonumber(sub(s, k + 8, k + 10), 16)
    if j ~= nil then gwent[sub(s, k, k + 7)] = j end
  end
end

-- Whether key v (kh) is new: in neither this state's memory nor the
-- table's "seen". Without a believed table no key is.
local function is_new(v, kh)
  if seen_str == nil or kh == nil or went[v] ~= nil or went_old[v] ~= nil then return false end
  local b = tonumber(sub(kh, 1, 4), 16)
  if b == nil then return false end
  local q = floor(b / 4) + 1
  local c = tonumber(sub(seen_str, q, q), 16)
  return c ~= nil and floor(c / 2 ^ (3 - b % 4)) % 2 == 0
end

-- Where key v (its hash's first eight hex digits kh) went last: its
-- host's index and address, or nil.
local function went_to(hosts, v, kh)
  local e = v ~= nil and (went[v] or went_old[v]) or nil
  if e ~= nil and (gwent == nil or e.ms > went_since) then return e.j, e.host end
  if gwent == nil or kh == nil then return nil end
  local j = gwent[kh]
  return j, j and hosts[j + 1]
end

-- The host of slot, or with a factor the host key v went to last if it
-- is under the bound, else the first host of the slot and the next slots
-- that is not overloaded (else the slot's own); its index; and whether
-- it is where the key went last.
local function bounded(hosts, slots, slot, factor, w, v, kh)
  local i = tonumber(sub(slots, 3 * slot + 1, 3 * slot + 3), 16)
  local host = i and hosts[i + 1]
  if type(host) ~= "string" or factor == nil then return host, i end
  local n = shares(slots)
  local j, h = went_to(hosts, v, kh)
  if j ~= nil and type(h) == "string" and (n[j] or 0) > 0 and hosts[j + 1] == h and not overloaded(n, j, h, factor, w) then
    return h, j, true
  end
  if j == nil and is_new(v, kh) then factor = math.min(factor, NEW_FACTOR) end
  if not overloaded(n, i, host, factor, w) then return host, i end
  local seen = {[i] = true}
  for k = 1, SLOTS - 1 do
    local s = (slot + k) % SLOTS
    local j = tonumber(sub(slots, 3 * s + 1, 3 * s + 3), 16)
    if j ~= nil and not seen[j] then
      seen[j] = true
      local h = hosts[j + 1]
      if type(h) == "string" and not overloaded(n, j, h, factor, w) then return h, j end
    end
  end
  return host, i
end

-- An adapter's candidates, from its entry in the table's "adapters"
-- ("MMM...|RRR...": its replicas, then the rest of its ranking, as host
-- indexes of three hex digits): its replicas in rendezvous order of the
-- request's key v and their addresses (random without a key), so that
-- each conversation keeps one, then the ranking, where a busy adapter's
-- overflow goes; and how many of them are its replicas.
local function adapter_candidates(entry, hosts, v)
  local bar = find(entry, "|", 1, true)
  if bar == nil then return nil end
  local ms, out = {}, {}
  for k = 1, bar - 1, 3 do
    local j = tonumber(sub(entry, k, k + 2), 16)
    if j ~= nil and type(hosts[j + 1]) == "string" then
      local score = v ~= nil and tonumber(sub(keyhash(v .. "\0" .. hosts[j + 1]), 1, 8), 16) or math.random()
      ms[#ms + 1] = {j = j, s = score}
    end
  end
  table.sort(ms, function(a, b) return a.s > b.s or (a.s == b.s and a.j < b.j) end)
  for _, m in ipairs(ms) do out[#out + 1] = m.j end
  for k = bar + 1, #entry, 3 do
    local j = tonumber(sub(entry, k, k + 2), 16)
    if j ~= nil and type(hosts[j + 1]) == "string" then out[#out + 1] = j end
  end
  if #out == 0 then return nil end
  return out, #ms
end

-- Of host i (named h): how many more adapters are in flight there than
-- it has slots (aslots, three hex digits per host; negative: free
-- slots), the adapters waiting there for a slot at least, and whether
-- adapter ad is one of them. In flight are the table's adapters and this
-- state's fresh requests', or without a table this state's own. Where
-- its slots are not known (aslots nil), 0 and true: it runs anything.
local function backlog(aslots, i, h, ad)
  if aslots == nil then return 0, true end
  local cap = tonumber(sub(aslots, 3 * i + 1, 3 * i + 3), 16)
  if cap == nil then return 0, true end
  local g = grun and grun[h]
  local mine = (gload ~= nil and fresh_ad or own_ad)[h]
  local n = g and g.n or 0
  if mine ~= nil then
    for name in pairs(mine) do
      if g == nil or not g.set[name] then n = n + 1 end
    end
  end
  local running = (g ~= nil and g.set[ad]) or (mine ~= nil and mine[ad] ~= nil)
  return n - cap, running and true or false
end

-- Whether host i (named h) can run adapter ad at once, as vLLM's
-- scheduler admits a request: ad is in flight there (then the second
-- result is true too), or fewer adapters are than its slots. The third
-- result is backlog's count, 0 where ad runs.
local function runs(aslots, i, h, ad)
  local over, running = backlog(aslots, i, h, ad)
  if running then return true, true, 0 end
  return over < 0, false, over
end

-- Of the candidate hosts (the adapter's nm replicas first), the first
-- that is not overloaded and can run adapter ad at once, being one of
-- its replicas or having it in flight; else the first that is not
-- overloaded, unless one that is not has BACKLOG_MOVE fewer adapters
-- waiting for a slot (the one with the fewest, first in order among
-- equals); else the first. A conversation keeps its replica while that
-- replica can run it without a wait for a slot, and leaves only for one
-- where its adapter runs: a replica with merely a free slot would load
-- the adapter afresh, with none of the adapter's cache. Where it must
-- wait, it waits where it was sent unless adapters queue there for
-- slots: a slot frees only when one of the replica's running adapters
-- has no request left, and each adapter ahead of it takes one.
local BACKLOG_MOVE = 3
-- An adapter request's bound is ADAPTER_FACTOR times the pool's: the
-- slots steer it, and a tighter bound on bytes spreads a busy adapter
-- over more replicas, each holding a slot with it, so that the adapters
-- running nowhere wait longer for one (measured on the multi-LoRA
-- benchmark, docs/benchmarks/workloads.md).
local ADAPTER_FACTOR = 5
local function bounded_list(hosts, slots, cands, nm, factor, w, aslots, ad, v)
  local first = hosts[cands[1] + 1]
  if factor == nil then return first, cands[1] end
  local n = shares(slots)
  -- A conversation sent elsewhere last computed its prompt there, and
  -- goes back while that candidate is under the bound and is one of the
  -- adapter's replicas that can run it at once, or runs it with a slot
  -- to spare. Kept on an overflow replica whose slots are all taken, a
  -- conversation would keep its adapter there too, holding a slot other
  -- adapters wait for (measured on the multi-LoRA benchmark,
  -- docs/benchmarks/workloads.md).
  local e = v ~= nil and (went[v] or went_old[v]) or nil
  if e ~= nil and e.j ~= cands[1] and hosts[e.j + 1] == e.host then
    for k, j in ipairs(cands) do
      if j == e.j then
        if not overloaded(n, j, e.host, factor, w) then
          local ok, running = runs(aslots, j, e.host, ad)
          if ok and k <= nm then return e.host, j end
          if running and backlog(aslots, j, e.host) < 0 then return e.host, j end
        end
        break
      end
    end
  end
  local under, uj, uover, least, lj, best = nil, nil, nil, nil, nil, nil
  for k, j in ipairs(cands) do
    local h = hosts[j + 1]
    if type(h) == "string" and not overloaded(n, j, h, factor, w) then
      local ok, running, over = runs(aslots, j, h, ad)
      if ok and (k <= nm or running) then return h, j end
      if under == nil then under, uj, uover = h, j, over end
      if least == nil or over < best then least, lj, best = h, j, over end
    end
  end
  if under ~= nil and uover - best >= BACKLOG_MOVE then return least, lj end
  if under ~= nil then return under, uj end
  return first, cands[1]
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
  -- A request naming a placed adapter picks among its candidates.
  local entry, name = nil, nil
  if ADAPTER_HEADER ~= nil then
    local ads
    name, ads = headers:get(ADAPTER_HEADER), md:get("adapters")
    if name == "" then name = nil end
    entry = name ~= nil and type(ads) == "table" and ads[name] or nil
    if type(entry) ~= "string" then entry = nil end
  end
  local slot, kh
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
    kh = sub(keyhash(v), 1, 8)
    slot = tonumber(kh, 16) % SLOTS
  elseif PREFILL_HEADER == nil and entry == nil then
    return -- no key: the cluster spreads it (its keyless route)
  else
    slot = math.random(0, SLOTS - 1)
  end
  local factor = md:get("balance")
  if type(factor) ~= "number" or factor < 100 or v == nil then factor = nil end
  -- With "bytes", a body of undeclared length weighs the mean of those
  -- in flight; without, a request weighs one.
  local w = nil
  local now = 0
  if md:get("bytes") == true then
    w = tonumber(headers:get("content-length"))
    if w == nil then w = count > 0 and total / count or 1 end
    if w < 1 then w = 1 end
    if factor ~= nil then
      now = now_ms(handle)
      -- A table counted more than load_ttl ms ago (kvxds gone, or its
      -- clock far from this one) is not believed.
      local ls, lag, at, ttl = md:get("load"), md:get("load_lag"), md:get("load_at"), md:get("load_ttl")
      if type(ls) ~= "string" or type(at) ~= "number" or type(ttl) ~= "number" or now - at > ttl then ls = nil end
      local run = md:get("running")
      if type(run) ~= "string" then run = nil end
      sync_load(ls, run, hosts, type(lag) == "number" and lag or 0, now)
      local ws = md:get("went")
      if type(ws) ~= "string" then ws = "" end
      if ls == nil then ws = nil end
      sync_went(ws, ls and at - (type(lag) == "number" and lag or 0) or 0)
      seen_str = md:get("seen")
      if ls == nil or type(seen_str) ~= "string" or #seen_str ~= 16384 then seen_str = nil end
      local cs = md:get("cached")
      if type(cs) ~= "string" or #cs ~= #hosts then cs = nil end
      miss = read_miss(cs, hosts)
      if miss ~= nil then
        eall = 0
        for _, h in ipairs(hosts) do
          if type(h) == "string" then eall = eall + bytes_of(h) * (miss[h] or 1) end
        end
      end
    end
  end
  local cands, nmem = nil, 0
  if entry then cands, nmem = adapter_candidates(entry, hosts, v) end
  local host
  if cands then
    local aslots = md:get("adapter_slots")
    if type(aslots) ~= "string" or #aslots ~= 3 * #hosts then aslots = nil end
    local hj
    host, hj = bounded_list(hosts, slots, cands, nmem, factor and factor * ADAPTER_FACTOR, w, aslots, name, v)
    if factor ~= nil and type(host) == "string" then remember(v, host, hj, now) end
  else
    local hj, followed
    host, hj, followed = bounded(hosts, slots, slot, factor, w, v, kh)
    if factor ~= nil and type(host) == "string" then
      remember(v, host, hj, now)
      -- The logs tell kvxds where the key went: home, or away from its
      -- slot's replica, following the key ("+") or past the bound ("*").
      if WENT_HEADER ~= nil then
        local home = tonumber(sub(slots, 3 * slot + 1, 3 * slot + 3), 16)
        if hj == home then
          headers:replace(WENT_HEADER, kh)
        else
          headers:replace(WENT_HEADER, kh .. (followed and "+" or "*"))
        end
      end
    end
  end
  if type(host) ~= "string" then return end
  if PREFILL_HEADER == nil then
    handle:setUpstreamOverrideHost(host, false)
  else
    headers:replace(PREFILL_HEADER, host)
  end
  if factor ~= nil then
    local t = os.time()
    next_id = next_id + 1
    expire(t)
    local o = {host = host, t = t, ms = now, w = w or 1, ad = name}
    if COMPUTED_HEADER ~= nil then o.rid = headers:get("x-request-id") end
    open[next_id] = o
    inflight[host] = (inflight[host] or 0) + o.w
    total = total + o.w
    count = count + 1
    if o.ad ~= nil then count_ad(own_ad, host, o.ad, 1) end
    if gload ~= nil and w ~= nil then
      o.gen = gen
      fresh[host] = (fresh[host] or 0) + o.w
      ftotal = ftotal + o.w
      if o.ad ~= nil then count_ad(fresh_ad, host, o.ad, 1) end
    end
    handle:streamInfo():dynamicMetadata():set("kvxds.prefill", "open", next_id)
  end
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- A client must not pick its own prefill replica.
  if PREFILL_HEADER ~= nil then headers:remove(PREFILL_HEADER) end
  if WENT_HEADER ~= nil then headers:remove(WENT_HEADER) end
  if COMPUTED_HEADER ~= nil then
    headers:remove(COMPUTED_HEADER)
    if #pending > 0 then
      headers:replace(COMPUTED_HEADER, table.concat(pending, ","))
      pending = {}
    end
  end
  local ok, err = pcall(set_prefill, handle, headers)
  if not ok then
    handle:logWarn("kvxds prefill: " .. tostring(err))
  end
end

-- The prefill replica answered (the decode replica's response starts once
-- its prefill is done): the request no longer counts. A replica picked
-- for the whole request (no PREFILL_HEADER) counts it until its
-- response body's first chunk: an engine sends its streamed response's
-- headers before it computes the prompt, and its first token once it
-- has; a replica decoding many replies computes no prompt, and what a
-- new request waits for there is prompts (measured: retrieval's TTFT
-- p95 halved with one Envoy's counts). A non-streamed response's body
-- comes whole at its end. The request's adapter counts until the end:
-- decoding, it holds a slot. In a pool serving adapters (UNTIL_END) the
-- request counts until its end too: there the requests that have not
-- started are mostly waiting for a slot, and a request whose adapter runs
-- on the replica passes them. The chunks pass as they arrive (bodyChunks
-- buffers nothing); a stream reset before its end leaves the request to
-- expire.
function envoy_on_response(handle)
  local md = handle:streamInfo():dynamicMetadata():get("kvxds.prefill")
  if md == nil or md.open == nil then return end
  if PREFILL_HEADER == nil then
    for _ in handle:bodyChunks() do
      if not UNTIL_END then notice(computed(md.open)) end
    end
  else
    notice(computed(md.open))
  end
  release(md.open)
end
