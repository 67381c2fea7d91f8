-- The edge's third filter, after the tenant's rate limit: reads the body of
-- what is let through. gRPC: the model a request names (field 1 of the
-- request message) must be one the tenant may call, or for a read, a stage
-- of one (what perf_analyzer reads of an ensemble). Inference, gRPC and
-- HTTP: the tenant's priority replaces whatever the client asked for; for a
-- tenant with a texts quota, the request's texts (the rows of the model's
-- text input) go into x-edge-texts, which the texts rate limit after this
-- filter takes from the tenant's bucket (server/edge/routes.py).
-- server/edge/routes.py prepends MODELS (tenant -> Triton model -> the input
-- holding its texts), STAGES (tenant -> the stages of its models it may
-- read), PRIORITY (tenant -> Triton priority level) and
-- TEXTS_PER_SECOND (tenant -> its texts quota, where it has one),
-- SPAN_METADATA (where the edge's span reads the model and the texts, nil
-- where the edge does not trace) and REFUSALS,
-- common.lua and wire.lua (reading protobuf and JSON).

-- shape[0] of the ModelInferRequest's input tensor (field 5) named `wanted`
-- (its field 1); its shape is field 3, packed or not. nil and why where
-- there is no one such input.
local function grpc_rows(s, i, last, wanted)
  local rows, found = nil, false
  while i <= last do
    local number, wire, first, stop, k = field(s, i, last)
    if number == nil then return nil, "malformed request message" end
    if number == 5 and wire == 2 then
      local name, dim = "", nil
      local j = first
      while j <= stop do
        local n, w, a, b, next_j = field(s, j, stop)
        if n == nil then return nil, "malformed request message" end
        if n == 1 and w == 2 then name = s:sub(a, b)
        elseif n == 3 and dim == nil then
          if w == 0 then dim = a
          elseif w == 2 and a <= b then
            local e
            dim, e = varint(s, a)
            if dim == nil or e > b + 1 then return nil, "malformed request message" end
          end
        end
        j = next_j
      end
      if name == wanted then
        if found then return nil, "input " .. wanted .. " is given twice" end
        rows, found = dim, true
      end
    end
    i = k
  end
  if not found then return nil, "no input " .. wanted end
  if rows == nil then return nil, "input " .. wanted .. " has no shape" end
  return rows
end

-- ModelInferRequest.parameters (field 4) is a map<string, InferParameter>;
-- an entry appended after the client's wins, since a later map entry
-- replaces an earlier one with the same key. Triton reads "priority" as
-- int64_param or uint64_param (src/grpc/infer_handler.cc); this is
-- uint64_param (field 5), as tritonclient sends it.
local function priority_entry(level)
  local value = "\40" .. string.char(level)           -- uint64_param, level < 128
  local entry = "\10\8priority" .. "\18" .. string.char(#value) .. value
  return "\34" .. string.char(#entry) .. entry          -- field 4, length-delimited
end

-- `rows` texts (or nil and why they could not be counted) into
-- x-edge-texts, for the texts rate limit; true where refused instead. A
-- request with more texts than the quota could never pass that limit, so it
-- is refused here as too large rather than answered "retry" forever.
local function count_texts(handle, headers, tenant, rows, why)
  local quota = TEXTS_PER_SECOND[tenant]
  if rows ~= nil and (rows < 1 or rows ~= math.floor(rows)) then
    why = "the shape of the texts input must start with a positive whole number"
  elseif rows ~= nil and rows > quota then
    refuse(handle, "too_many_texts", string.format("%.0f", rows), tostring(quota))
    return true
  end
  if why ~= nil then
    refuse(handle, "unreadable", why)
    return true
  end
  headers:replace("x-edge-texts", string.format("%d", rows))
  name_for_span(handle, "texts", string.format("%d", rows))
  return false
end

-- What a tenant may ask of a stage of its models: never an inference.
local STAGE_READS = {
  ModelMetadata = true, ModelConfig = true, ModelReady = true, ModelStatistics = true,
}

local function on_grpc(handle, headers, tenant, method)
  local body = handle:body()
  local bytes = body and body:getBytes(0, body:length()) or ""
  if #bytes < 5 then return refuse(handle, "unreadable", "no request message") end
  if bytes:byte(1) ~= 0 then
    -- A compressed message cannot be read here, so it cannot be checked.
    return refuse(handle, "compressed")
  end
  local a, b, c, d = bytes:byte(2, 5)
  local length = ((a * 256 + b) * 256 + c) * 256 + d
  if length ~= #bytes - 5 then
    return refuse(handle, "unreadable", "expected exactly one request message")
  end
  local model = field_one(bytes, 6, #bytes)
  if model == nil then return refuse(handle, "unreadable", "malformed request message") end
  -- No model named: every model's statistics, which stats.lua cuts to the
  -- models this key may read.
  local all_stats = model == "" and method == "ModelStatistics"
  if not (all_stats or MODELS[tenant][model] or (STAGES[tenant][model] and STAGE_READS[method])) then
    return refuse(handle, STAGES[tenant][model] and "stage_not_callable" or "model_not_allowed",
      printable(model))
  end
  if model ~= "" then name_for_span(handle, "model", model) end
  if method == "ModelInfer" then
    if TEXTS_PER_SECOND[tenant] then
      local rows, why = grpc_rows(bytes, 6, #bytes, MODELS[tenant][model])
      -- The headers object of before the body was read is stale.
      if count_texts(handle, handle:headers(), tenant, rows, why) then return end
    end
    local entry = priority_entry(PRIORITY[tenant])
    body:setBytes("\0" .. be32(length + #entry) .. bytes:sub(6) .. entry)
  end
end

-- The JSON with the top-level parameters' "priority" set to `level`, or
-- nil, the refusal and its detail.
local function with_priority(json, start, top, level)
  local parameters, twice = only(top, "parameters")
  if twice then return nil, "unreadable", twice end
  if parameters == nil then
    local comma = #top > 0 and "," or ""
    return json:sub(1, start) .. '"parameters":{"priority":' .. level .. "}" .. comma
      .. json:sub(start + 1)
  end
  if json:byte(parameters[3]) ~= 123 then
    return nil, "unreadable", "'parameters' must be an object"
  end
  local inner = members(json, parameters[3], 1)
  local edits = {}
  for _, m in ipairs(inner) do
    if m[2] then return nil, "unreadable", "escaped parameter names are not accepted" end
    if m[1] == "priority" then
      if not json:sub(m[3], m[4] - 1):match("^%d+$") then return nil, "priority" end
      edits[#edits + 1] = m
    end
  end
  if #edits == 0 then
    local open = parameters[3]
    local comma = #inner > 0 and "," or ""
    return json:sub(1, open) .. '"priority":' .. level .. comma .. json:sub(open + 1)
  end
  -- Every "priority" the client wrote becomes the tenant's, whichever one
  -- the server would read.
  for k = #edits, 1, -1 do
    local m = edits[k]
    json = json:sub(1, m[3] - 1) .. level .. json:sub(m[4])
  end
  return json
end

-- shape[0] of the input named `wanted` in the top-level "inputs" array, or
-- nil and why where there is no one such input. Escaped keys and names
-- are refused: the edge would not see the name the server reads.
local function json_rows(json, top, wanted)
  local inputs, why = only(top, "inputs")
  if inputs == nil or json:byte(inputs[3]) ~= 91 then
    return nil, why or "'inputs' must be an array"
  end
  local rows, found = nil, false
  local i = ws(json, inputs[3] + 1)
  -- The whole body was scanned already: the array is well formed.
  while json:byte(i) ~= 93 do
    if json:byte(i) ~= 123 then return nil, "each input must be an object" end
    local list, after = members(json, i, 2)
    for _, m in ipairs(list) do
      if m[2] then return nil, "escaped input keys are not accepted" end
    end
    local name, twice = only(list, "name")
    if twice then return nil, twice end
    local shape, twice_shape = only(list, "shape")
    if twice_shape then return nil, twice_shape end
    if name == nil or json:byte(name[3]) ~= 34 then return nil, "each input needs a 'name' string" end
    local _, escaped = str(json, name[3])
    if escaped then return nil, "escaped input names are not accepted" end
    if json:sub(name[3] + 1, name[4] - 2) == wanted then
      if found then return nil, "input " .. wanted .. " is given twice" end
      found = true
      if shape == nil or json:byte(shape[3]) ~= 91 then
        return nil, "input " .. wanted .. " needs a 'shape' array"
      end
      local first = ws(json, shape[3] + 1)
      rows = tonumber(json:sub(first, (value(json, first, 3) or first) - 1):match("^%d+$") or "")
      if rows == nil then
        return nil, "the shape of input " .. wanted .. " must start with a whole number"
      end
    end
    i = ws(json, after)
    if json:byte(i) == 44 then i = ws(json, i + 1) end
  end
  if not found then return nil, "no input " .. wanted end
  return rows
end

local function on_http_infer(handle, headers, tenant)
  if headers:get("content-encoding") ~= nil then
    return refuse(handle, "compressed")
  end
  local body = handle:body()
  local bytes = body and body:getBytes(0, body:length()) or ""
  -- Envoy's Lua hands out a new headers object once the body is in.
  headers = handle:headers()
  -- Triton's binary extension: a JSON header of this length, then raw tensors.
  local header_length = headers:get("inference-header-content-length")
  local json_length = #bytes
  if header_length ~= nil then
    json_length = tonumber(header_length:match("^%d+$") or "")
    if json_length == nil or json_length > #bytes then
      return refuse(handle, "unreadable", "bad inference-header-content-length")
    end
  end
  local json = bytes:sub(1, json_length)
  local top, start = top_members(json)
  if top == nil then return refuse(handle, "unreadable", start) end
  if TEXTS_PER_SECOND[tenant] then
    local model = headers:get(":path"):match("^/v2/models/([^/]+)")
    local rows, why = json_rows(json, top, MODELS[tenant][model])
    if count_texts(handle, headers, tenant, rows, why) then return end
  end
  local refusal, why
  json, refusal, why = with_priority(json, start, top, PRIORITY[tenant])
  if json == nil then return refuse(handle, refusal, why) end
  local rewritten = json .. bytes:sub(json_length + 1)
  body:setBytes(rewritten)
  if header_length ~= nil then headers:replace("inference-header-content-length", tostring(#json)) end
  -- A chunked request has no length to fix; Envoy frames it anew.
  if headers:get("content-length") ~= nil then
    headers:replace("content-length", tostring(#rewritten))
  end
end

local function on_request(handle)
  local headers = handle:headers()
  local tenant = headers:get("x-tenant")
  if tenant == nil then return end   -- health, open to all (auth.lua)
  local path = headers:get(":path") or ""
  if grpc_request(headers) then
    local method = path:sub(#GRPC_PREFIX + 1)
    if path:sub(1, #GRPC_PREFIX) == GRPC_PREFIX and GRPC_NAMED[method] then
      return on_grpc(handle, headers, tenant, method)
    end
  elseif path:match("^/v2/models/[^/]+/infer$") or path:match("^/v2/models/[^/]+/versions/%d+/infer$") then
    return on_http_infer(handle, headers, tenant)
  end
end

envoy_on_request = fail_closed("edge.body", on_request)
