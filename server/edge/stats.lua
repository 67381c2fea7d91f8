-- The edge's fourth filter, after body.lua: Triton's answer to a request
-- for every model's statistics (GET /v2/models/stats; gRPC ModelStatistics
-- naming no model), which perf_analyzer asks for to break an ensemble's
-- time down by stage, is cut to the models the key may read: its models'
-- entry points (MODELS) and their stages (STAGES). Other tenants' models
-- are neither named nor counted. server/edge/routes.py prepends the
-- tables, common.lua and wire.lua.

local METADATA = "edge.stats"
-- What passes where the answer cannot be read: no statistics, rather than
-- unchecked ones.
local NO_GRPC_STATS = "\0\0\0\0\0"
local NO_JSON_STATS = '{"model_stats":[]}'

local function readable(tenant, name)
  return name ~= nil and (MODELS[tenant][name] ~= nil or STAGES[tenant][name] ~= nil)
end

-- The ModelStatisticsResponse (one gRPC message) with only the readable
-- entries of model_stats (field 1, each named in its own field 1); nil
-- where it cannot be read.
local function grpc_kept(bytes, tenant)
  if #bytes < 5 or bytes:byte(1) ~= 0 then return nil end
  local a, b, c, d = bytes:byte(2, 5)
  if ((a * 256 + b) * 256 + c) * 256 + d ~= #bytes - 5 then return nil end
  local kept, i = {}, 6
  while i <= #bytes do
    local number, wire, first, stop, k = field(bytes, i, #bytes)
    if number == nil then return nil end
    if number == 1 and wire == 2 and readable(tenant, field_one(bytes, first, stop)) then
      kept[#kept + 1] = bytes:sub(i, k - 1)
    end
    i = k
  end
  local message = table.concat(kept)
  return "\0" .. be32(#message) .. message
end

-- Triton's JSON statistics with only the readable entries of
-- "model_stats"; nil where they cannot be read.
local function json_kept(json, tenant)
  local top = top_members(json)
  if top == nil then return nil end
  local stats = only(top, "model_stats")
  if stats == nil or json:byte(stats[3]) ~= 91 then return nil end
  local kept = {}
  local i = ws(json, stats[3] + 1)
  -- top_members scanned the whole body: the array is well formed.
  while json:byte(i) ~= 93 do
    if json:byte(i) ~= 123 then return nil end
    local list, after = members(json, i, 2)
    local name = only(list, "name")
    if name == nil or json:byte(name[3]) ~= 34 then return nil end
    local _, escaped = str(json, name[3])
    if escaped then return nil end
    if readable(tenant, json:sub(name[3] + 1, name[4] - 2)) then
      kept[#kept + 1] = json:sub(i, after - 1)
    end
    i = ws(json, after)
    if json:byte(i) == 44 then i = ws(json, i + 1) end
  end
  return '{"model_stats":[' .. table.concat(kept, ",") .. "]}"
end

local function on_request(handle)
  local headers = handle:headers()
  local tenant = headers:get("x-tenant")
  local path = headers:get(":path")
  if tenant ~= nil and (path == ALL_STATS_PATH or path == GRPC_PREFIX .. "ModelStatistics") then
    -- An answer compressed could not be read.
    headers:remove("accept-encoding")
    headers:remove("grpc-accept-encoding")
    handle:streamInfo():dynamicMetadata():set(METADATA, "tenant", tenant)
  end
end

local function on_response(handle)
  local marked = handle:streamInfo():dynamicMetadata():get(METADATA)
  if marked == nil then return end
  local grpc = (handle:headers():get("content-type") or ""):sub(1, 16) == "application/grpc"
  local body = handle:body()
  -- A refusal: gRPC trailers only, or Triton's error JSON.
  if body == nil or body:length() == 0 then return end
  local headers = handle:headers()
  if not grpc and headers:get(":status") ~= "200" then return end
  local kept = (grpc and grpc_kept or json_kept)(body:getBytes(0, body:length()), marked.tenant)
  if kept == nil then kept = grpc and NO_GRPC_STATS or NO_JSON_STATS end
  body:setBytes(kept)
  if headers:get("content-length") ~= nil then
    headers:replace("content-length", tostring(#kept))
  end
end

envoy_on_request = fail_closed("edge.stats", on_request)
-- A Lua error would let the whole answer through: an empty one instead.
function envoy_on_response(handle)
  local ok, failure = pcall(on_response, handle)
  if not ok then
    handle:logErr("edge.stats: " .. tostring(failure))
    handle:body():setBytes("")
  end
end
