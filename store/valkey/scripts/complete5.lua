#!lua
-- complete5.lua: store the completed record while the record holds the token, layout 5 (store.Store.Complete).
-- KEYS[1] record key. ARGV[1] "5r" ns(token), the start of the running
-- record of layout 5 the token holds; ARGV[2] the completed record (layout
-- 4's), built by idemgate; ARGV[3] retention ms (0 = keep it forever);
-- ARGV[4] events channel; ARGV[5] "4c" ns(token), the start of the record
-- that token completed; ARGV[6] "1" = acks on: a repeat by the token that
-- completed the record re-confirms it; ARGV[7] "4r" ns(token), the start of
-- a running record of layout 4 the token holds; ARGV[8] "1" = the record
-- may not be held any more (the claim's lease may have passed, or a
-- completion of this token failed): its expiry is read first, so that a
-- record put back keeps it exactly.
-- Returns 1 when completed (or re-confirmed), 0 when the token does not
-- hold the record, 2 when the record is a hash (layouts 1 to 3:
-- complete.lua's).
-- Without acks the one command is SET ... XX GET: it replaces the record
-- and returns the old one, which the token must hold; a record it does not
-- hold is put back at once (a script is atomic: no client sees the
-- completed record in between), with its own expiry where the record
-- carries one (docs/protocol.md, "Layout 5 (Valkey)"). SET ... GET on a
-- hash fails with WRONGTYPE before it writes, so hashes are never touched.
-- PUBLISH only when a waiter marked the record (its last byte "1"), or
-- for a record of layout 4, which no waiter marks.
local key = KEYS[1]
local function set()
  if ARGV[3] == '0' then
    return redis.pcall('SET', key, ARGV[2], 'XX', 'GET')
  end
  return redis.pcall('SET', key, ARGV[2], 'XX', 'GET', 'PX', ARGV[3])
end
local function wrongtype(v)
  return type(v) == 'table' and v.err
end
local function held(v)
  if string.sub(v, 1, #ARGV[1]) == ARGV[1] then
    if string.sub(v, -1) == '1' then
      redis.call('PUBLISH', ARGV[4], key)
    end
    return true
  end
  if string.sub(v, 1, #ARGV[7]) == ARGV[7] then
    redis.call('PUBLISH', ARGV[4], key)
    return true
  end
  return false
end
if ARGV[6] == '1' then
  -- With acks: read first, so that a repeat re-confirms the record as it
  -- is (complete4.lua's rule); the WAIT after this script is the cost.
  local v = redis.pcall('GET', key)
  if wrongtype(v) then
    return 2
  end
  if not v then
    return 0
  end
  if string.sub(v, 1, #ARGV[1]) == ARGV[1] or string.sub(v, 1, #ARGV[7]) == ARGV[7] then
    local r = set()
    if wrongtype(r) then
      return redis.error_reply(r.err)
    end
    held(v)
    return 1
  end
  if string.sub(v, 1, #ARGV[5]) == ARGV[5] then
    redis.call('SET', key, v, 'KEEPTTL')
    return 1
  end
  return 0
end
-- A completed record put back must keep its expiry: its completion time
-- is that expiry - retention_ms, which the resource index names
-- (tombstone.lua) and which replays report.
local e = false
if ARGV[8] == '1' then
  e = redis.call('PEXPIRETIME', key)
end
local v = set()
if wrongtype(v) then
  if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
    return 2
  end
  return redis.error_reply(v.err)
end
if not v then
  -- Absent: XX wrote nothing.
  return 0
end
if held(v) then
  return 1
end
if e then
  -- Exactly as it was: bytes and expiry (-1: none).
  if e > 0 then
    redis.call('SET', key, v, 'PXAT', e)
  else
    redis.call('SET', key, v)
  end
  return 0
end
-- Not held, though within the claim's lease (an operator purged the key,
-- and it was claimed again): put the old record back. Layout 5 carries
-- its expiry (the number before the mark): exactly as it was. Layout 4,
-- and layout 5 whose expiry is 0 (a fresh claim that did not know it),
-- carry their times relative to their expiry E, with age_ms = E - (the
-- claim's time) >= E - now: now + age_ms is never earlier than E (a
-- longer lease only delays a takeover). A completed record of layout 4
-- expires retention_ms after its completion: now + retention_ms is never
-- earlier either (none for 0). Anything else (no record idemgate writes)
-- keeps no expiry: never removed early.
local s2 = string.sub(v, 1, 2)
if s2 == '5r' then
  local age, e = string.match(v, ' (%d+) [01] (%d+) [01]$')
  if e and e ~= '0' then
    redis.call('SET', key, v, 'PXAT', e)
    return 0
  elseif age then
    redis.call('SET', key, v, 'PX', age)
    return 0
  end
elseif s2 == '4r' then
  local age = string.match(v, ' (%d+) [01]$')
  if age then
    redis.call('SET', key, v, 'PX', age)
    return 0
  end
elseif s2 == '4c' then
  local colon = string.find(v, ':', 3, true)
  local n = colon and tonumber(string.sub(v, 3, colon - 1))
  local rt
  if n then
    local c2 = string.find(v, ':', colon + n + 1, true)
    local m = c2 and tonumber(string.sub(v, colon + n + 1, c2 - 1))
    rt = m and tonumber(string.sub(v, c2 + 1, c2 + m))
  end
  if rt == 0 then
    redis.call('SET', key, v)
    return 0
  elseif rt then
    redis.call('SET', key, v, 'PX', rt)
    return 0
  end
end
redis.call('SET', key, v)
return 0
