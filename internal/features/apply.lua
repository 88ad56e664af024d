-- Applies one event to one entity's running totals and returns the entity's
-- features right after it. The key layout, fields and TTLs are described in
-- doc.go; every key of the call shares the entity's hash tag, so the call
-- stays on one Cluster slot.
--
-- KEYS: 1 replay zset, 2 minute hash, 3 hour hash, 4 day hash,
--       5 out-counterparty zset, 6 in-counterparty zset
-- ARGV: 1 mode ('t' transaction, 'e' account event, 'r' read only)
--       2 event id (16 bytes)     3 now (unix ms, wall clock)
--       4 replay ttl (ms)         5 occurred_at (unix s)
--       6 direction ('o' | 'i')   7 currency
--       8 amount (integer string, units of 0.0001: never a Lua number)
--       9 the other side (16 bytes; '' none)   10 account event type
--       11 ttl of the minute hash (s)  12 of the hour hash  13 of the day hash and the zsets
--       14 '1' when the event type's latest time is kept (sim_swap, profile_change)
--
-- Money never becomes a Lua number (a double): sums are changed with
-- HINCRBY on strings and read back with HMGET as strings. Counts, bucket
-- numbers and times are integers far below 2^53.
local mode = ARGV[1]
local now = tonumber(ARGV[3])
local rttl = tonumber(ARGV[4])
local t = tonumber(ARGV[5])
local dir, cur, amt, member, etype = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local SEP = '\1'
local DAY = 86400

-- S formats an integer for a command argument: how Redis turns a Lua number
-- into a string differs between versions (%.17g, or a shortest form that may
-- use an exponent).
local function S(x) return string.format('%d', x) end

-- Replay memory: ZADD NX answers 0 for an id still remembered.
local seen = 0
if mode ~= 'r' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZADD', KEYS[1], 'NX', S(now + rttl), ARGV[2]) == 0 then
    seen = 1
  else
    redis.call('PEXPIRE', KEYS[1], S(rttl + 60000))
  end
end
local write = mode ~= 'r' and seen == 0

-- One hash per granularity; wins lists its windows shortest first, each
-- with the prefix of its totals; the last (longest) says which buckets are kept.
local G = {
  { key = KEYS[2], g = 60, wins = { { 60, 't' } }, ttl = ARGV[11] },
  { key = KEYS[3], g = 3600, wins = { { 24, 't' } }, ttl = ARGV[12] },
  { key = KEYS[4], g = DAY, wins = { { 7, 's' }, { 30, 't' } }, ttl = ARGV[13] },
}
local FIXED = { 'oc', 'ic', 'dp', 'ds' }

local function neg(v)
  if string.sub(v, 1, 1) == '-' then return string.sub(v, 2) end
  return '-' .. v
end

local function dims(s)
  local r = {}
  for x in string.gmatch(s.d, '[^\1]+') do r[#r + 1] = x end
  return r
end

-- roll advances a hash's head to the event's bucket: every bucket leaving a
-- window is subtracted from that window's totals, and deleted once it leaves
-- the longest one. An advance past the longest window empties the hash.
local function roll(s)
  local hd = redis.call('HMGET', s.key, 'h', 'd')
  s.h = tonumber(hd[1])
  s.d = hd[2] or SEP
  if not write then return end
  local b = math.floor(t / s.g)
  if s.h == nil then
    s.h = b
    redis.call('HSET', s.key, 'h', S(b))
    return
  end
  if b <= s.h then return end
  local L = s.wins[#s.wins][1]
  if b - s.h >= L then
    redis.call('DEL', s.key)
    s.h, s.d = b, SEP
    redis.call('HSET', s.key, 'h', S(b))
    return
  end
  local fields = {}
  for i, f in ipairs(FIXED) do fields[i] = f end
  for _, f in ipairs(dims(s)) do fields[#fields + 1] = f end
  for wi, w in ipairs(s.wins) do
    local len, p = w[1], w[2]
    for x = s.h - len + 1, b - len do
      local names = {}
      for i, f in ipairs(fields) do names[i] = S(x) .. ':' .. f end
      local vals = redis.call('HMGET', s.key, unpack(names))
      local present = {}
      for i = 1, #names do
        local v = vals[i]
        if v then
          if v ~= '0' then redis.call('HINCRBY', s.key, p .. ':' .. fields[i], neg(v)) end
          present[#present + 1] = names[i]
        end
      end
      if wi == #s.wins and #present > 0 then redis.call('HDEL', s.key, unpack(present)) end
    end
  end
  s.h = b
  redis.call('HSET', s.key, 'h', S(b))
end

-- add counts incr in bucket b and in every window of s that covers b; a
-- bucket older than the longest window is not kept at all.
local function add(s, b, f, incr)
  if b <= s.h - s.wins[#s.wins][1] then return end
  redis.call('HINCRBY', s.key, S(b) .. ':' .. f, incr)
  for _, w in ipairs(s.wins) do
    if b > s.h - w[1] then redis.call('HINCRBY', s.key, w[2] .. ':' .. f, incr) end
  end
end

-- dim records a field name whose buckets roll must also visit.
local function dim(s, f)
  if not string.find(s.d, SEP .. f .. SEP, 1, true) then
    s.d = s.d .. f .. SEP
    redis.call('HSET', s.key, 'd', s.d)
  end
end

for _, s in ipairs(G) do roll(s) end
local dayHead = G[3].h or -1
local dk = KEYS[4]

local function within30(ts)
  return ts ~= nil and math.floor(ts / DAY) > dayHead - 30
end

local newcp, ssp = 0, -1
if write and mode == 't' then
  local lt = tonumber(redis.call('HGET', dk, 'lt'))
  if within30(lt) then
    if lt > t then ssp = 0 else ssp = t - lt end
  end
  if lt == nil or t > lt then redis.call('HSET', dk, 'lt', S(t)) end

  local cf, sf = dir .. 'c', dir .. 's:' .. cur
  for _, s in ipairs(G) do
    local b = math.floor(t / s.g)
    add(s, b, cf, 1)
    if amt ~= '0' then
      dim(s, sf)
      add(s, b, sf, amt)
    end
  end

  if member ~= '' then
    local lo = tonumber(redis.call('ZSCORE', KEYS[5], member))
    local li = tonumber(redis.call('ZSCORE', KEYS[6], member))
    if not within30(lo) and not within30(li) then newcp = 1 end
    local z, dz, old = KEYS[5], 'dp', lo
    if dir == 'i' then z, dz, old = KEYS[6], 'ds', li end
    -- The member's latest bucket moves: the distinct counts count each
    -- member once, in the bucket of its latest transaction.
    if old == nil or t > old then
      redis.call('ZADD', z, S(t), member)
      for i = 2, 3 do
        local s = G[i]
        local bn = math.floor(t / s.g)
        if old == nil then
          add(s, bn, dz, 1)
        else
          local bo = math.floor(old / s.g)
          if bo ~= bn then
            add(s, bo, dz, -1)
            add(s, bn, dz, 1)
          end
        end
      end
    end
    redis.call('ZREMRANGEBYSCORE', z, '-inf', '(' .. S((dayHead - 29) * DAY))
    redis.call('EXPIRE', z, ARGV[13])
  end
elseif write and mode == 'e' then
  local ef = 'e:' .. etype
  for _, s in ipairs(G) do
    dim(s, ef)
    add(s, math.floor(t / s.g), ef, 1)
  end
  if ARGV[14] == '1' then
    local f = 'ls:' .. etype
    local v = tonumber(redis.call('HGET', dk, f))
    if v == nil or t > v then redis.call('HSET', dk, f, S(t)) end
  end
end

if write then
  local mx = tonumber(redis.call('HGET', dk, 'mx'))
  if mx == nil or t > mx then redis.call('HSET', dk, 'mx', S(t)) end
  for _, s in ipairs(G) do redis.call('EXPIRE', s.key, s.ttl) end
end

-- Features right after the event.
local m = redis.call('HMGET', KEYS[2], 't:oc', 't:ic', 't:os:' .. cur, 't:is:' .. cur)
local h = redis.call('HMGET', KEYS[3], 't:oc', 't:ic', 't:os:' .. cur, 't:is:' .. cur, 't:dp', 't:ds')
local d = redis.call('HMGET', dk, 's:oc', 's:ic', 's:os:' .. cur, 's:is:' .. cur,
  't:oc', 't:ic', 't:os:' .. cur, 't:is:' .. cur, 't:dp', 't:ds', 'ls:sim_swap', 'ls:profile_change', 'mx')
local ref = t
if mode == 'r' then ref = tonumber(d[13]) or 0 end

local function since(v)
  v = tonumber(v)
  if not within30(v) then return -1 end
  if v > ref then return 0 end
  return ref - v
end

local function events(s, p)
  local names, types = {}, {}
  for _, f in ipairs(dims(s)) do
    if string.sub(f, 1, 2) == 'e:' then
      names[#names + 1] = p .. ':' .. f
      types[#types + 1] = string.sub(f, 3)
    end
  end
  local out = {}
  if #names == 0 then return out end
  local vals = redis.call('HMGET', s.key, unpack(names))
  for i = 1, #names do
    if vals[i] and vals[i] ~= '0' then
      out[#out + 1] = types[i]
      out[#out + 1] = vals[i]
    end
  end
  return out
end

return {
  seen,
  m[1], m[2], m[3], m[4],
  h[1], h[2], h[3], h[4], h[5], h[6],
  d[1], d[2], d[3], d[4],
  d[5], d[6], d[7], d[8], d[9], d[10],
  newcp, ssp, since(d[11]), since(d[12]),
  events(G[1], 't'), events(G[2], 't'), events(G[3], 's'),
}
