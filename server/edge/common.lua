-- What the filters share; server/edge/routes.py puts it in front of each,
-- after REFUSALS, ERROR_MEMBERS and REFUSAL_METADATA (server/edge/refusals.py).
local GRPC_PREFIX = "/inference.GRPCInferenceService/"
-- gRPC methods whose request names the model in field 1: body.lua checks it.
local GRPC_NAMED = {
  ModelInfer = true, ModelMetadata = true, ModelConfig = true,
  ModelReady = true, ModelStatistics = true,
}
-- Every model's statistics over HTTP (gRPC: ModelStatistics naming none).
local ALL_STATS_PATH = "/v2/models/stats"

local function grpc_request(headers)
  return (headers:get("content-type") or ""):sub(1, 16) == "application/grpc"
end

-- A name the client sent, as a message may carry it.
local function printable(name)
  return (name:gsub("[^%w%._%-]", "?"))
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

-- gRPC carries a message percent-encoded: every byte outside printable
-- ASCII, and "%" itself.
local function percent_encoded(s)
  return (s:gsub("[^ -$&-~]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- Answers with refusal `name` of REFUSALS, its detail filled with `...`
-- (the request's own words): over gRPC its code and message in a
-- trailers-only answer, over HTTP its status and a JSON body.
local function refuse(handle, name, ...)
  local refusal = REFUSALS[name]
  local message = refusal.prefix .. string.format(refusal.detail, ...)
  -- The listeners' local replies then leave this answer as it is.
  handle:streamInfo():dynamicMetadata():set(REFUSAL_METADATA, "name", name)
  -- Fresh headers: those read before the body came in are stale.
  if grpc_request(handle:headers()) then
    handle:respond({ [":status"] = "200", ["content-type"] = "application/grpc",
      ["grpc-status"] = refusal.grpc, ["grpc-message"] = percent_encoded(message) }, "")
  else
    local headers = { [":status"] = tostring(refusal.http), ["content-type"] = "application/json" }
    if refusal.http == 401 then headers["www-authenticate"] = "Bearer" end
    handle:respond(headers, "{" .. json_string(ERROR_MEMBERS.message) .. ":" .. json_string(message)
      .. "," .. json_string(ERROR_MEMBERS.kind) .. ":" .. json_string(refusal.kind) .. "}")
  end
end

-- A Lua error would let the request through unchecked: fail closed, with
-- the bare status should even the refusal fail.
local function fail_closed(filter, on_request)
  return function(handle)
    local ok, failure = pcall(on_request, handle)
    if not ok then
      handle:logErr(filter .. ": " .. tostring(failure))
      if not pcall(refuse, handle, "internal") then
        handle:respond({ [":status"] = "500" }, "")
      end
    end
  end
end

-- What the edge's span names (server/edge/tracing.py), where it traces
-- (SPAN_METADATA set): the model a request is for, once the tenant may use
-- it, and the texts counted.
local function name_for_span(handle, key, value)
  if SPAN_METADATA then handle:streamInfo():dynamicMetadata():set(SPAN_METADATA, key, value) end
end
