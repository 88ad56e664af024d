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
--       8 amount (integer string, units of 0.0001)
--       9 the other side (16 bytes; '' none)   10 account event type
--       11 ttl of the minute hash (s)  12 of the hour hash  13 of the day hash and the zsets
--       14 '1' when the event type's latest time is kept (sim_swap, profile_change)
--       15, 16, 17 the event's minute, hour and day bucket numbers followed by ':'
--       18 '1' when the account event counts are wanted (customers)
--
-- Speed: each hash is read with one HMGET and written with one HSET per
-- call (plus one HMGET per bucket leaving a window); the arithmetic happens
-- in Lua in between.
--
-- Exactness: Lua numbers are doubles. A field's new value is computed in Lua
-- only when both operands are below 2^52 in magnitude, so the result is an
-- exact integer below 2^53; otherwise (a huge sum of money) the field is
-- changed with HINCRBY on the integer strings and read back as a string.
-- The amount comes in as a string and is never rounded.
local mode = ARGV[1]
local now = tonumber(ARGV[3])
local rttl = tonumber(ARGV[4])
local t = tonumber(ARGV[5])
local dir, cur, amt, member, etype = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local SEP = '\1'
local DAY = 86400
local TWO52 = 4503599627370496
local floor = math.floor

-- S formats an integer for a command argument: how Redis turns a Lua number
-- into a string differs between versions (%.17g, or a shortest form that may
-- use an exponent).
local function S(x) return string.format('%d', x) end
local function str(v)
  if type(v) == 'number' then return S(v) end
  return v
end
local function neg(v)
  if string.sub(v, 1, 1) == '-' then return string.sub(v, 2) end
  return '-' .. v
end

-- Replay memory: ZADD NX answers 0 for an id still remembered.
local seen = 0
if mode ~= 'r' then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', S(now))
  if redis.call('ZADD', KEYS[1], 'NX', S(now + rttl), ARGV[2]) == 0 then
    seen = 1
  else
    redis.call('PEXPIRE', KEYS[1], S(rttl + 60000))
  end
end
local write = mode ~= 'r' and seen == 0

-- A cache of one hash's fields: values are exact integers as Lua numbers,
-- or strings; dirty fields are written by flush in one HSET.
local Cache = {}
Cache.__index = Cache
local function newCache(key)
  return setmetatable({ key = key, v = {}, loaded = {}, dirty = {}, del = {}, fresh = false }, Cache)
end
function Cache:load(names)
  local want = {}
  for _, f in ipairs(names) do
    if not self.loaded[f] then
      self.loaded[f] = true
      want[#want + 1] = f
    end
  end
  if #want == 0 or self.fresh then return end
  local vals = redis.call('HMGET', self.key, unpack(want))
  for i, f in ipairs(want) do
    if vals[i] then self.v[f] = vals[i] end
  end
end
function Cache:get(f)
  if not self.loaded[f] then self:load({ f }) end
  return self.v[f]
end
function Cache:set(f, x)
  self.loaded[f] = true
  self.v[f] = x
  self.dirty[f] = true
end
function Cache:incr(f, d)
  local old = self:get(f)
  local o = old and tonumber(old) or 0
  local dn = tonumber(d)
  if o > -TWO52 and o < TWO52 and dn > -TWO52 and dn < TWO52 then
    self.v[f] = o + dn
    self.dirty[f] = true
    return
  end
  -- Beyond int64 HINCRBY would fail, and a script's earlier writes are not
  -- rolled back: such a sum (over 9 * 10^14 in currency units) stays put.
  if math.abs(o + dn) >= 9.1e18 then return end
  if self.dirty[f] then
    redis.call('HSET', self.key, f, str(self.v[f]))
    self.dirty[f] = nil
  end
  redis.call('HINCRBY', self.key, f, str(d))
  self.v[f] = redis.call('HGET', self.key, f)
end
-- reset forgets everything: the hash was deleted.
function Cache:reset()
  self.v, self.loaded, self.dirty, self.del, self.fresh = {}, {}, {}, {}, true
end
function Cache:flush()
  local args, dels = {}, self.del
  for f in pairs(self.dirty) do
    local v = self.v[f]
    -- A zero count or sum is the same as no field: delete it, keeping the hash small.
    if (v == 0 or v == '0') and string.find(f, ':', 1, true) and string.sub(f, 1, 3) ~= 'ls:' then
      dels[#dels + 1] = f
    else
      args[#args + 1] = f
      args[#args + 1] = str(v)
    end
  end
  if #args > 0 then redis.call('HSET', self.key, unpack(args)) end
  if #dels > 0 then redis.call('HDEL', self.key, unpack(dels)) end
end

-- One hash per granularity; wins lists its windows shortest first, each
-- with the prefix of its totals; the last (longest) says which buckets are kept.
local G = {
  { c = newCache(KEYS[2]), g = 60, wins = { { 60, 't' } }, ttl = ARGV[11], bp = ARGV[15] },
  { c = newCache(KEYS[3]), g = 3600, wins = { { 24, 't' } }, ttl = ARGV[12], bp = ARGV[16] },
  { c = newCache(KEYS[4]), g = DAY, wins = { { 7, 's' }, { 30, 't' } }, ttl = ARGV[13], bp = ARGV[17] },
}
local FIXED = { 'oc', 'ic', 'dp', 'ds' }
-- The totals fields of the features, per window prefix, built once.
local OUT = { 'oc', 'ic', 'os:' .. cur, 'is:' .. cur, 'dp', 'ds' }
local TOT = { t = {}, s = {} }
for p, names in pairs(TOT) do
  for i, f in ipairs(OUT) do names[i] = p .. ':' .. f end
end

local function dims(s)
  local r = {}
  for x in string.gmatch(s.d, '[^\1]+') do r[#r + 1] = x end
  return r
end

-- The other side's latest times before this event, per direction.
local lo, li
if write and mode == 't' and member ~= '' then
  lo = tonumber(redis.call('ZSCORE', KEYS[5], member))
  li = tonumber(redis.call('ZSCORE', KEYS[6], member))
end
local old = lo
if dir == 'i' then old = li end
local dz = 'dp'
if dir == 'i' then dz = 'ds' end

-- preload: everything this call will probably read from the hash, in one HMGET.
local function preload(s, i)
  local names = { 'h', 'd' }
  for _, w in ipairs(s.wins) do
    for _, f in ipairs(TOT[w[2]]) do names[#names + 1] = f end
  end
  if write then
    local b = s.bp
    if mode == 't' then
      names[#names + 1] = b .. dir .. 'c'
      names[#names + 1] = b .. dir .. 's:' .. cur
      if member ~= '' and i > 1 then
        names[#names + 1] = b .. dz
        if old then names[#names + 1] = S(floor(old / s.g)) .. ':' .. dz end
      end
    else
      names[#names + 1] = b .. 'e:' .. etype
      for _, w in ipairs(s.wins) do names[#names + 1] = w[2] .. ':e:' .. etype end
    end
  end
  if i == 3 then
    names[#names + 1] = 'lt'
    names[#names + 1] = 'mx'
    names[#names + 1] = 'ls:sim_swap'
    names[#names + 1] = 'ls:profile_change'
  end
  s.c:load(names)
end

-- roll advances a hash's head to the event's bucket: every bucket leaving a
-- window is subtracted from that window's totals, and deleted once it leaves
-- the longest one. An advance past the longest window empties the hash.
local function roll(s)
  local c = s.c
  s.h = tonumber(c:get('h'))
  s.d = c:get('d') or SEP
  if not write then return end
  local b = floor(t / s.g)
  if s.h == nil then
    s.h = b
    c:set('h', b)
    return
  end
  if b <= s.h then return end
  local L = s.wins[#s.wins][1]
  if b - s.h >= L then
    redis.call('DEL', c.key)
    c:reset()
    s.h, s.d = b, SEP
    c:set('h', b)
    return
  end
  local fields = {}
  for i, f in ipairs(FIXED) do fields[i] = f end
  for _, f in ipairs(dims(s)) do fields[#fields + 1] = f end
  for wi, w in ipairs(s.wins) do
    local len, p = w[1], w[2]
    for x = s.h - len + 1, b - len do
      local names = {}
      local xs = S(x) .. ':'
      for i, f in ipairs(fields) do names[i] = xs .. f end
      local vals = redis.call('HMGET', c.key, unpack(names))
      for i = 1, #names do
        local v = vals[i]
        if v then
          if v ~= '0' then c:incr(p .. ':' .. fields[i], neg(v)) end
          if wi == #s.wins then c.del[#c.del + 1] = names[i] end
        end
      end
    end
  end
  s.h = b
  c:set('h', b)
end

-- add counts incr in bucket b and in every window of s that covers b; a
-- bucket older than the longest window is not kept at all. bp is b's field
-- prefix when the caller has it.
local function add(s, b, f, incr, bp)
  if b <= s.h - s.wins[#s.wins][1] then return end
  s.c:incr((bp or (S(b) .. ':')) .. f, incr)
  for _, w in ipairs(s.wins) do
    if b > s.h - w[1] then s.c:incr(w[2] .. ':' .. f, incr) end
  end
end

-- dim records a field name whose buckets roll must also visit.
local function dim(s, f)
  if not string.find(s.d, SEP .. f .. SEP, 1, true) then
    s.d = s.d .. f .. SEP
    s.c:set('d', s.d)
  end
end

for i, s in ipairs(G) do
  preload(s, i)
  roll(s)
end
local day = G[3].c
local dayHead = G[3].h or -1

local function within30(ts)
  return ts ~= nil and floor(ts / DAY) > dayHead - 30
end

local newcp, ssp = 0, -1
if write and mode == 't' then
  local lt = tonumber(day:get('lt'))
  if within30(lt) then
    if lt > t then ssp = 0 else ssp = t - lt end
  end
  if lt == nil or t > lt then day:set('lt', t) end

  local cf, sf = dir .. 'c', dir .. 's:' .. cur
  for _, s in ipairs(G) do
    local b = floor(t / s.g)
    add(s, b, cf, 1, s.bp)
    if amt ~= '0' then
      dim(s, sf)
      add(s, b, sf, amt, s.bp)
    end
  end

  if member ~= '' then
    if not within30(lo) and not within30(li) then newcp = 1 end
    local z = KEYS[5]
    if dir == 'i' then z = KEYS[6] end
    -- The member's latest bucket moves: the distinct counts count each
    -- member once, in the bucket of its latest transaction.
    if old == nil or t > old then
      redis.call('ZADD', z, S(t), member)
      for i = 2, 3 do
        local s = G[i]
        local bn = floor(t / s.g)
        if old == nil then
          add(s, bn, dz, 1, s.bp)
        else
          local bo = floor(old / s.g)
          if bo ~= bn then
            add(s, bo, dz, -1)
            add(s, bn, dz, 1, s.bp)
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
    add(s, floor(t / s.g), ef, 1, s.bp)
  end
  if ARGV[14] == '1' then
    local f = 'ls:' .. etype
    local v = tonumber(day:get(f))
    if v == nil or t > v then day:set(f, t) end
  end
end

if write then
  local mx = tonumber(day:get('mx'))
  if mx == nil or t > mx then day:set('mx', t) end
  for _, s in ipairs(G) do
    s.c:flush()
    redis.call('EXPIRE', s.c.key, s.ttl)
  end
end

-- Features right after the event. Exact integers go back as integer
-- replies, huge sums as the strings HINCRBY left.
local function out(s, p, i)
  local v = s.c:get(TOT[p][i])
  if v == nil then return 0 end
  return v
end
local ref = t
if mode == 'r' then ref = tonumber(day:get('mx')) or 0 end

local function since(v)
  v = tonumber(v)
  if not within30(v) then return -1 end
  if v > ref then return 0 end
  return ref - v
end

local function events(s, p)
  local r = {}
  if ARGV[18] ~= '1' then return r end
  local names, types = {}, {}
  for _, f in ipairs(dims(s)) do
    if string.sub(f, 1, 2) == 'e:' then
      names[#names + 1] = p .. ':' .. f
      types[#types + 1] = string.sub(f, 3)
    end
  end
  s.c:load(names)
  for i = 1, #names do
    local v = tonumber(s.c.v[names[i]])
    if v and v ~= 0 then
      r[#r + 1] = types[i]
      r[#r + 1] = v
    end
  end
  return r
end

local m, h, d = G[1], G[2], G[3]
return {
  seen,
  out(m, 't', 1), out(m, 't', 2), out(m, 't', 3), out(m, 't', 4),
  out(h, 't', 1), out(h, 't', 2), out(h, 't', 3), out(h, 't', 4), out(h, 't', 5), out(h, 't', 6),
  out(d, 's', 1), out(d, 's', 2), out(d, 's', 3), out(d, 's', 4),
  out(d, 't', 1), out(d, 't', 2), out(d, 't', 3), out(d, 't', 4), out(d, 't', 5), out(d, 't', 6),
  newcp, ssp, since(day:get('ls:sim_swap')), since(day:get('ls:profile_change')),
  events(m, 't'), events(h, 't'), events(d, 's'),
}
