-- A stand-in for the parts of Envoy's Lua request handle that the
-- generated prefill script uses, to run it under a plain LuaJIT:
-- handle:headers() (:get, :replace, :remove), handle:metadata() (:get;
-- nil-valued without a table, as for a route without metadata),
-- handle:streamInfo():dynamicMetadata() (:get, :set, per request),
-- handle:setUpstreamOverrideHost(host, strict) (which sets the
-- pseudo-header ":override" to host, and " strict" if strict) and
-- handle:logWarn(msg); and envoy_on_response, with handle:bodyChunks()
-- (a response ends as it starts, or its first chunk comes before its
-- end).
--
-- Usage: luajit prefill_standin.lua SCRIPT TABLE CASES HEADER
-- where TABLE is a file of "slots" on its first line and one host per
-- line after it, or "hot<TAB>index:value<TAB>spread" for a hot key, or
-- "balance<TAB>factor", or "bytes", or "cached<TAB>C" for "cached", or
-- "adapter<TAB>name<TAB>entry" for an
-- adapter's entry in "adapters", or "adapter_slots<TAB>S" ("-" for a
-- route without metadata), and CASES a
-- file of lines "content-length<TAB>header=value<TAB>...", "-" for no
-- content-length, or "respond<TAB>N" to run envoy_on_response for the
-- N-th request (from 1), or "first<TAB>N" to run it up to the response
-- body's first chunk and "end<TAB>N" to end that body, or "clock<TAB>T" to make os.time() return T from
-- then on (0 at first), or "ms<TAB>M" to make handle:timestamp() return M
-- (milliseconds; 0 at first), or "load<TAB>L<TAB>LAG<TAB>AT<TAB>TTL" to
-- set the table's "load" to L, "load_lag" to LAG, "load_at" to AT and
-- "load_ttl" to TTL (the fleet's bytes in flight, as a table push brings
-- them), or "running<TAB>R" to set the table's "running" to R with "/"
-- for tabs and "," for spaces, or "went<TAB>W" to set the table's
-- "went" to W ("-": none), or "seen<TAB>S" to set its "seen" to S ("-":
-- none). Prints per request the value of HEADER after
-- the run, or "-" (of each of "A+B", joined by "|"); nothing for a
-- response, a clock, a load, a running, a went or a seen.

local script, tablefile, casefile, header = arg[1], arg[2], arg[3], arg[4]
dofile(script)

local md = nil
local f = assert(io.open(tablefile, "rb"))
local first = f:read("*l")
if first ~= "-" then
  local hosts, hot, balance, md_bytes, adapters, aslots, cached = {}, nil, nil, nil, nil, nil, nil
  for line in f:lines() do
    local cs = string.match(line, "^cached\t(%x+)$")
    local as = string.match(line, "^adapter_slots\t(%x+)$")
    local an, ae = string.match(line, "^adapter\t([^\t]+)\t(.*)$")
    local k, n = string.match(line, "^hot\t(.*)\t(%d+)$")
    local b = string.match(line, "^balance\t(%d+)$")
    local bytes = line == "bytes"
    if cs ~= nil then
      cached = cs
    elseif as ~= nil then
      aslots = as
    elseif an ~= nil then
      adapters = adapters or {}
      adapters[an] = ae
    elseif k ~= nil then
      hot = hot or {}
      hot[k] = tonumber(n)
    elseif b ~= nil then
      balance = tonumber(b)
    elseif bytes then
      md_bytes = true
    else
      hosts[#hosts + 1] = line
    end
  end
  md = {hosts = hosts, slots = first, hot = hot, balance = balance, bytes = md_bytes, adapters = adapters, adapter_slots = aslots, cached = cached}
end
f:close()

os.time = function() return 0 end
local ms = 0
local handles, streaming = {}, {}
for line in io.lines(casefile) do
  local n = string.match(line, "^respond\t(%d+)$")
  local fn = string.match(line, "^first\t(%d+)$")
  local en = string.match(line, "^end\t(%d+)$")
  local clock = string.match(line, "^clock\t(%d+)$")
  local msv = string.match(line, "^ms\t(%d+)$")
  local load, lag, at, ttl = string.match(line, "^load\t([%d,]+)\t(%d+)\t(%d+)\t(%d+)$")
  local running = string.match(line, "^running\t(.*)$")
  local wentv = string.match(line, "^went\t(.*)$")
  local seenv = string.match(line, "^seen\t(.*)$")
  if seenv ~= nil then
    md.seen = seenv ~= "-" and seenv or nil
  elseif wentv ~= nil then
    md.went = wentv ~= "-" and wentv or nil
  elseif fn ~= nil then
    -- The body's first chunk, then a wait for its end.
    local handle, chunks = handles[tonumber(fn)], 0
    function handle:bodyChunks()
      return function()
        chunks = chunks + 1
        if chunks == 1 then return {} end
        coroutine.yield()
        return nil
      end
    end
    local co = coroutine.create(envoy_on_response)
    assert(coroutine.resume(co, handle))
    streaming[tonumber(fn)] = co
  elseif en ~= nil then
    local co = streaming[tonumber(en)]
    streaming[tonumber(en)] = nil
    if co ~= nil and coroutine.status(co) == "suspended" then assert(coroutine.resume(co)) end
  elseif running ~= nil then
    md.running = string.gsub(string.gsub(running, "/", "\t"), ",", " ")
  elseif n ~= nil then
    envoy_on_response(handles[tonumber(n)])
  elseif msv ~= nil then
    ms = tonumber(msv)
  elseif load ~= nil then
    md.load, md.load_lag, md.load_at, md.load_ttl = load, tonumber(lag), tonumber(at), tonumber(ttl)
  elseif clock ~= nil then
    local now = tonumber(clock)
    os.time = function() return now end
  else
    local fields = {}
    for x in string.gmatch(line, "[^\t]+") do fields[#fields + 1] = x end
    local t = {[":method"] = "POST"}
    if fields[1] ~= "-" then t["content-length"] = fields[1] end
    for i = 2, #fields do
      local eq = string.find(fields[i], "=", 1, true)
      t[string.sub(fields[i], 1, eq - 1)] = string.sub(fields[i], eq + 1)
    end
    local h = {}
    function h:get(name) return t[name] end
    function h:replace(name, value) t[name] = tostring(value) end
    function h:remove(name) t[name] = nil end
    local dm, ns = {}, {}
    function dm:set(filter, key, value) ns[filter] = ns[filter] or {}; ns[filter][key] = value end
    function dm:get(filter) return ns[filter] end
    local si = {}
    function si:dynamicMetadata() return dm end
    local handle = {}
    function handle:headers() return h end
    function handle:metadata()
      local m = {}
      function m:get(k) if md == nil then return nil end return md[k] end
      return m
    end
    function handle:streamInfo() return si end
    function handle:timestamp() return ms end
    function handle:logWarn(msg) io.stderr:write(msg, "\n") end
    -- A response ends as it starts: its body has no chunks.
    function handle:bodyChunks() return function() return nil end end
    function handle:setUpstreamOverrideHost(host, strict)
      t[":override"] = host .. (strict and " strict" or "")
    end
    handles[#handles + 1] = handle
    envoy_on_request(handle)
    local out = {}
    for name in string.gmatch(header, "[^+]+") do out[#out + 1] = t[name] or "-" end
    print(table.concat(out, "|"))
  end
end
