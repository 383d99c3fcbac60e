-- Times the generated script per request under LuaJIT, as Envoy runs it:
-- headers, body() and getBytes (one copy of the body), the scan and the
-- hash. Usage: luajit bench.lua SCRIPT BODY ITERATIONS
-- Prints the headers set, then p50, p99 and mean in nanoseconds of the
-- thread's CPU time (what the filter costs, apart from waiting for a CPU
-- on a loaded machine), then of wall time.
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } kvxds_timespec;
  int clock_gettime(int clk, kvxds_timespec *ts);
]]
local ts = ffi.new("kvxds_timespec")
local function now(clk)
  ffi.C.clock_gettime(clk, ts)
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end
local CPU, WALL = 3, 1 -- CLOCK_THREAD_CPUTIME_ID, CLOCK_MONOTONIC

dofile(arg[1])
local f = assert(io.open(arg[2], "rb"))
local body = f:read("*a")
f:close()
local iters = tonumber(arg[3])

local t = {}
local h = {}
function h:get(name) return t[name] end
function h:replace(name, value) t[name] = value end
function h:remove(name) t[name] = nil end
local b = {}
function b:length() return #body end
function b:getBytes(i, n) return string.sub(body, i + 1, i + n) end
local handle = {}
function handle:headers() return h end
function handle:body() return b end
function handle:logWarn(msg) io.stderr:write(msg, "\n") end

local cpu, wall = {}, {}
for i = 1, iters do
  t = {["content-length"] = tostring(#body)}
  local w0, c0 = now(WALL), now(CPU)
  envoy_on_request(handle)
  cpu[i], wall[i] = now(CPU) - c0, now(WALL) - w0
end
local set = {}
for k, v in pairs(t) do
  if string.sub(k, 1, 8) == "x-kvxds-" then set[#set + 1] = k .. "=" .. v end
end
table.sort(set)
print(table.concat(set, " "))
local function stats(times)
  local sum = 0
  for _, v in ipairs(times) do sum = sum + v end
  table.sort(times)
  return string.format("%d %d %d", times[math.ceil(iters * 0.5)], times[math.ceil(iters * 0.99)], sum / iters)
end
print(stats(cpu) .. " " .. stats(wall))
