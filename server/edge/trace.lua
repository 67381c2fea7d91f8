-- The edge's upstream filter on the clusters to Triton, with traces on
-- (server/edge/tracing.py): it runs after Envoy's tracer has set the
-- context of what Triton is sent. Triton traces every request that carries
-- a context, sampled or not, so an unsampled one is removed; a sampled
-- one's trace id is answered in x-trace-id, as the gateway answers it.
-- Envoy writes "00-<trace id>-<span id>-<flags>"; a context Envoy could not
-- read is passed on as the client sent it, and removed here too: Triton
-- would read it as none.
-- Of the sampled ones, at most TRACED_PER_SECOND (set above this file, this
-- worker's share) are passed on each clock second; the rest are removed,
-- the request traced at the edge only.
local SAMPLED = "^00%-(%x+)%-%x+%-%x(%x)$"

local second, passed = -1, 0

local function within_budget()
  local now = os.time()
  if now ~= second then
    second, passed = now, 0
  end
  if passed >= TRACED_PER_SECOND then return false end
  passed = passed + 1
  return true
end

function envoy_on_request(handle)
  local headers = handle:headers()
  -- Set at the edge for Envoy's own decision (server/edge/tracing.py).
  headers:remove("x-client-trace-id")
  local context = headers:get("traceparent")
  if context == nil then return end
  local trace, flags = context:match(SAMPLED)
  if trace ~= nil and #trace == 32 and tonumber(flags, 16) % 2 == 1 then
    handle:streamInfo():dynamicMetadata():set("edge.trace", "id", trace)
    if within_budget() then return end
  end
  headers:remove("traceparent")
  headers:remove("tracestate")
end

function envoy_on_response(handle)
  local traced = handle:streamInfo():dynamicMetadata():get("edge.trace")
  if traced ~= nil then
    handle:headers():replace("x-trace-id", traced["id"])
  end
end
