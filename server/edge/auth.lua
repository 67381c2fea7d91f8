-- The edge's first filter: who is calling, and may they call this at all.
-- Runs on the request headers only, so a refusal here never buffers a body.
-- On the answer, Triton's own refusals of an overloaded model say when to
-- come back, as the edge's quota refusals do. server/edge/routes.py
-- prepends the tables, TENANTS (key SHA-256 hex -> tenant), MODELS (tenant
-- -> Triton model -> the input holding its texts), STAGES (tenant -> the
-- stages of its models it may read), RETRY_AFTER_S and REFUSALS, and
-- common.lua.
local bit = require("bit")
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local lshift, rshift, ror, tobit, tohex = bit.lshift, bit.rshift, bit.ror, bit.tobit, bit.tohex

-- Envoy's Lua has no digest function: SHA-256 (FIPS 180-4) on LuaJIT's
-- 32-bit bit operations, since the file holds only hashes of the keys.
local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

local function sha256_hex(message)
  local length = #message
  local bits = length * 8
  message = message .. "\128" .. string.rep("\0", (55 - length) % 64)
    .. "\0\0\0\0" .. string.char(
      band(rshift(bits, 24), 255), band(rshift(bits, 16), 255),
      band(rshift(bits, 8), 255), band(bits, 255))
  local h0, h1, h2, h3 = 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a
  local h4, h5, h6, h7 = 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
  local w = {}
  for chunk = 1, #message, 64 do
    for i = 0, 15 do
      local a, b, c, d = message:byte(chunk + i * 4, chunk + i * 4 + 3)
      w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
    end
    for i = 16, 63 do
      local x, y = w[i - 15], w[i - 2]
      local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
      local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
      w[i] = tobit(w[i - 16] + s0 + w[i - 7] + s1)
    end
    local a, b, c, d, e, f, g, h = h0, h1, h2, h3, h4, h5, h6, h7
    for i = 0, 63 do
      local s1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
      local ch = bxor(band(e, f), band(bnot(e), g))
      local t1 = tobit(h + s1 + ch + K[i + 1] + w[i])
      local s0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
      local maj = bxor(band(a, b), band(a, c), band(b, c))
      h, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + s0 + maj)
    end
    h0, h1, h2, h3 = tobit(h0 + a), tobit(h1 + b), tobit(h2 + c), tobit(h3 + d)
    h4, h5, h6, h7 = tobit(h4 + e), tobit(h5 + f), tobit(h6 + g), tobit(h7 + h)
  end
  return tohex(h0) .. tohex(h1) .. tohex(h2) .. tohex(h3)
    .. tohex(h4) .. tohex(h5) .. tohex(h6) .. tohex(h7)
end

-- Health answers without a key: load balancers probe it.
local OPEN = {
  ["/v2/health/live"] = true, ["/v2/health/ready"] = true,
  [GRPC_PREFIX .. "ServerLive"] = true, [GRPC_PREFIX .. "ServerReady"] = true,
}
-- With a key and no model: the server's metadata, and every model's
-- statistics, which stats.lua cuts to the models the key may read.
local KEYED = {
  ["/v2"] = true, [GRPC_PREFIX .. "ServerMetadata"] = true, [ALL_STATS_PATH] = true,
}
-- What a tenant may do with an allowed model over HTTP (the model's
-- metadata, readiness, config, statistics, inference); the rest of Triton's
-- API (repository, shared memory, trace, logging, generate) stays internal.
local HTTP_MODEL_ACTIONS = { [""] = true, ["/ready"] = true, ["/config"] = true,
  ["/stats"] = true, ["/infer"] = true }
-- With a stage of an allowed model (what perf_analyzer reads of an
-- ensemble): its metadata, readiness, config and statistics, never an
-- inference.
local HTTP_STAGE_ACTIONS = { [""] = true, ["/ready"] = true, ["/config"] = true,
  ["/stats"] = true }
local MAX_KEY_BYTES = 512

local function on_request(handle)
  local headers = handle:headers()
  -- Only the edge names the tenant, the cluster and the texts counted; a
  -- client's own headers of those names are dropped.
  headers:remove("x-tenant")
  headers:remove("x-edge-cluster")
  headers:remove("x-edge-texts")
  local path = headers:get(":path") or ""
  local grpc = grpc_request(headers)
  local protocol = grpc and "-grpc" or "-http"
  if path:find("?", 1, true) then
    return refuse(handle, "query_string")
  end
  local count = headers:getNumValues("authorization")
  if count == 0 and OPEN[path] then
    headers:replace("x-edge-cluster", "open" .. protocol)
    handle:clearRouteCache()
    return
  end
  if count ~= 1 then
    return refuse(handle, "no_key")
  end
  -- HTTP takes the spaces around a header's value as no part of it; gRPC
  -- metadata keeps them (perf_analyzer's -H "authorization: Bearer KEY").
  local value = headers:get("authorization"):match("^[ \t]*(.-)[ \t]*$")
  local key = value:match("^[Bb]earer ([\33-\126]+)$")
  if key == nil or #key > MAX_KEY_BYTES then
    return refuse(handle, "no_key")
  end
  local tenant = TENANTS[sha256_hex(key)]
  if tenant == nil then
    return refuse(handle, "unknown_key")
  end
  -- Triton never sees the key.
  headers:remove("authorization")
  if grpc then
    local method = path:sub(1, #GRPC_PREFIX) == GRPC_PREFIX and path:sub(#GRPC_PREFIX + 1) or ""
    if not (GRPC_NAMED[method] or OPEN[path] or KEYED[path]) then
      return refuse(handle, "not_offered")
    end
  elseif not (OPEN[path] or KEYED[path]) then
    local model, rest = path:match("^/v2/models/([^/]+)(.*)$")
    if model == nil then
      return refuse(handle, "not_offered")
    end
    rest = rest:gsub("^/versions/%d+", "")
    if not HTTP_MODEL_ACTIONS[rest] then
      return refuse(handle, "not_offered")
    end
    if not (MODELS[tenant][model] or (STAGES[tenant][model] and HTTP_STAGE_ACTIONS[rest])) then
      return refuse(handle, STAGES[tenant][model] and "stage_not_callable" or "model_not_allowed",
        printable(model))
    end
    name_for_span(handle, "model", model)
  end
  headers:replace("x-tenant", tenant)
  headers:replace("x-edge-cluster", "tenant-" .. tenant .. protocol)
  -- The route (the tenant's cluster and rate limit) was chosen before the
  -- tenant was known.
  handle:clearRouteCache()
end

envoy_on_request = fail_closed("edge.auth", on_request)

-- A full queue is UNAVAILABLE: 503 over HTTP, gRPC status 14 in a
-- trailers-only answer (its headers). The answer's body and trailers are not
-- waited for: every answer passes here.
function envoy_on_response(handle)
  local headers = handle:headers()
  if headers:get(":status") == "503" then
    headers:replace("retry-after", tostring(RETRY_AFTER_S))
  elseif headers:get("grpc-status") == "14" then
    headers:replace("grpc-retry-pushback-ms", tostring(RETRY_AFTER_S * 1000))
  end
end
