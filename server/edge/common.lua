-- What both filters share; server/edge/config.py puts it in front of each.
local GRPC_PREFIX = "/inference.GRPCInferenceService/"
-- gRPC methods whose request names the model in field 1: body.lua checks it.
local GRPC_NAMED = {
  ModelInfer = true, ModelMetadata = true, ModelConfig = true,
  ModelReady = true, ModelStatistics = true,
}
-- Every model's statistics over HTTP (gRPC: ModelStatistics naming none).
local ALL_STATS_PATH = "/v2/models/stats"
local GRPC_CODES = { [400] = "3", [401] = "16", [403] = "7", [415] = "3" }

local function refuse(handle, grpc, status, message)
  if grpc then
    -- Trailers-only gRPC answer: the status a gRPC client reads.
    handle:respond({ [":status"] = "200", ["content-type"] = "application/grpc",
      ["grpc-status"] = GRPC_CODES[status], ["grpc-message"] = message }, "")
  else
    local headers = { [":status"] = tostring(status), ["content-type"] = "application/json" }
    if status == 401 then headers["www-authenticate"] = "Bearer" end
    handle:respond(headers, '{"error":"' .. message .. '"}')
  end
end

-- A Lua error would let the request through unchecked: fail closed.
local function fail_closed(filter, on_request)
  return function(handle)
    local ok, failure = pcall(on_request, handle)
    if not ok then
      handle:logErr(filter .. ": " .. tostring(failure))
      handle:respond({ [":status"] = "500" }, "edge error")
    end
  end
end

-- What the edge's span names (server/edge/tracing.py), where it traces
-- (SPAN_METADATA set): the model a request is for, once the tenant may use
-- it, and the texts counted.
local function name_for_span(handle, key, value)
  if SPAN_METADATA then handle:streamInfo():dynamicMetadata():set(SPAN_METADATA, key, value) end
end
