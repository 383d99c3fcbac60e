-- A minimal stand-in for the parts of Envoy's Lua request handle that the
-- generated script uses, to run it under a plain LuaJIT:
--
--   handle:headers()      :get(name), :replace(name, value), :remove(name)
--   handle:body()         nil without a body; else :length(), :getBytes(i, n)
--   handle:logWarn(msg)
--
-- As in Envoy, header names are lower case, getBytes rejects a range past
-- the end, and body() fails the request (413) when the body exceeds the
-- stream's buffer limit.
--
-- Usage: luajit standin.lua SCRIPT NOBIT BUFFER_LIMIT CASE...
-- where each CASE is a file of "content-length header or -", a newline,
-- then the body (no body at all if the file ends after the newline).
-- Prints one line per case: the case, the number of body() calls, then
-- every x-kvxds-* header after the script ran, sorted, as name=value.

local script, nobit, limit = arg[1], arg[2] == "1", tonumber(arg[3])
if nobit then bit = nil end -- take the script's pure-Lua path
dofile(script)

local function headers_of(t)
  local h = {}
  function h:get(name) return t[name] end
  function h:replace(name, value) t[name] = tostring(value) end
  function h:remove(name) t[name] = nil end
  return h
end

local function body_of(s)
  local b = {}
  function b:length() return #s end
  function b:getBytes(i, n)
    if i < 0 or n < 0 or i + n > #s then
      error("index/length must be >= 0 and (index + length) must be <= buffer size")
    end
    return string.sub(s, i + 1, i + n)
  end
  return b
end

for c = 4, #arg do
  local f = assert(io.open(arg[c], "rb"))
  local raw = f:read("*a")
  f:close()
  local nl = string.find(raw, "\n", 1, true)
  local cl, body = string.sub(raw, 1, nl - 1), string.sub(raw, nl + 1)
  local t = {
    [":method"] = "POST",
    -- A client trying to pick its own replica.
    ["x-kvxds-key-1"] = "spoofed", ["x-kvxds-key-5"] = "spoofed",
  }
  -- One more header a client sent, named by the test: "name" (sent as
  -- "spoofed") or "name=value".
  local spoof = os.getenv("KVXDS_STANDIN_SPOOF")
  if spoof ~= nil and spoof ~= "" then
    local eq = string.find(spoof, "=", 1, true)
    if eq then t[string.sub(spoof, 1, eq - 1)] = string.sub(spoof, eq + 1) else t[spoof] = "spoofed" end
  end
  if cl ~= "-" then t["content-length"] = cl end
  local calls, warnings = 0, {}
  local handle = {}
  function handle:headers() return headers_of(t) end
  function handle:body()
    calls = calls + 1
    if #body == 0 then return nil end
    if #body > limit then error("413 payload too large") end
    return body_of(body)
  end
  function handle:logWarn(msg) warnings[#warnings + 1] = msg end
  envoy_on_request(handle)
  local names = {}
  for k in pairs(t) do
    if string.sub(k, 1, 8) == "x-kvxds-" then names[#names + 1] = k end
  end
  table.sort(names)
  local out = {arg[c], tostring(calls)}
  for _, k in ipairs(names) do out[#out + 1] = k .. "=" .. t[k] end
  for _, w in ipairs(warnings) do out[#out + 1] = "warn=" .. w end
  print(table.concat(out, "\t"))
end
