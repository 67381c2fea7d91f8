-- Reading what the edge buffers, gRPC messages and JSON, for the filters
-- that check or rewrite them (body.lua, stats.lua); server/edge/routes.py
-- puts it in front of each, after common.lua.

-- Protocol buffers -------------------------------------------------------

local function varint(s, i)
  local value, scale = 0, 1
  for j = i, math.min(i + 9, #s) do
    local b = s:byte(j)
    value = value + (b % 128) * scale
    if b < 128 then return value, j + 1 end
    scale = scale * 128
  end
  return nil
end

-- The field at s[i] of a message that ends at s[last]: its number, its
-- wire type, for a varint its value (else nil), for a length-delimited
-- field the first and last index of its bytes, and where the next field
-- starts; nil where the message is malformed.
local function field(s, i, last)
  local tag, j = varint(s, i)
  if tag == nil or j > last + 1 then return nil end
  local number, wire = math.floor(tag / 8), tag % 8
  if wire == 0 then
    local v, k = varint(s, j)
    if v == nil or k > last + 1 then return nil end
    return number, wire, v, nil, k
  elseif wire == 1 or wire == 5 then
    local k = j + (wire == 1 and 8 or 4)
    if k > last + 1 then return nil end
    return number, wire, nil, nil, k
  elseif wire == 2 then
    local length, k = varint(s, j)
    if length == nil or k + length - 1 > last then return nil end
    return number, wire, k, k + length - 1, k + length
  end
  return nil
end

-- The last field-1 string of a message (protobuf: the last one wins), or
-- nil where the message is malformed.
local function field_one(s, i, last)
  local name = ""
  while i <= last do
    local number, wire, first, stop, k = field(s, i, last)
    if number == nil then return nil end
    if number == 1 and wire == 2 then name = s:sub(first, stop) end
    i = k
  end
  return name
end

-- A gRPC message's length prefix.
local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

-- JSON -------------------------------------------------------------------
-- Just enough of a scanner to find top-level members and the members of
-- objects in them; anything it does not follow is refused rather than
-- guessed at, so Triton never reads what the edge did not check.

local function ws(s, i) return s:find("[^ \t\r\n]", i) or #s + 1 end

local function str(s, i)
  local escaped = false
  local j = i + 1
  while true do
    local k = s:find('["\\]', j)
    if k == nil then return nil end
    if s:byte(k) == 92 then escaped = true; j = k + 2 else return k + 1, escaped end
  end
end

local value

-- Members of the object at s[i] == "{": a list of {key, escaped, value
-- start, value end (exclusive)}, and the index after the object.
local function members(s, i, depth)
  local list = {}
  i = ws(s, i + 1)
  if s:byte(i) == 125 then return list, i + 1 end
  while true do
    if s:byte(i) ~= 34 then return nil end
    local j, escaped = str(s, i)
    if j == nil then return nil end
    local key = s:sub(i + 1, j - 2)
    j = ws(s, j)
    if s:byte(j) ~= 58 then return nil end
    local start = ws(s, j + 1)
    local stop = value(s, start, depth + 1)
    if stop == nil then return nil end
    list[#list + 1] = { key, escaped, start, stop }
    i = ws(s, stop)
    local sep = s:byte(i)
    if sep == 44 then i = ws(s, i + 1)
    elseif sep == 125 then return list, i + 1
    else return nil end
  end
end

value = function(s, i, depth)
  if depth > 64 then return nil end
  local c = s:byte(i)
  if c == 34 then return (str(s, i))
  elseif c == 123 then
    local _, j = members(s, i, depth)
    return j
  elseif c == 91 then
    i = ws(s, i + 1)
    if s:byte(i) == 93 then return i + 1 end
    while true do
      local j = value(s, i, depth + 1)
      if j == nil then return nil end
      i = ws(s, j)
      local sep = s:byte(i)
      if sep == 44 then i = ws(s, i + 1)
      elseif sep == 93 then return i + 1
      else return nil end
    end
  elseif c ~= nil then
    local j = s:find("[^%w%.%+%-]", i) or #s + 1
    if j == i then return nil end
    return j
  end
  return nil
end

-- The members of the top-level object and where it starts, or nil and the
-- reason.
local function top_members(json)
  local start = ws(json, 1)
  if json:byte(start) ~= 123 then return nil, "the body must be a JSON object" end
  local top, stop = members(json, start, 0)
  if top == nil or ws(json, stop) <= #json then return nil, "the body is not JSON the edge can read" end
  for _, m in ipairs(top) do
    if m[2] then return nil, "escaped top-level keys are not accepted" end
  end
  return top, start
end

-- The one member named `key` of a members list, or nil (and why, where
-- there are two: which one the server reads is not for the edge to guess).
local function only(list, key)
  local found
  for _, m in ipairs(list) do
    if m[1] == key then
      if found then return nil, "two '" .. key .. "' members" end
      found = m
    end
  end
  return found
end
