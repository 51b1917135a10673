#!lua
-- claim.lua: take the record for one identity (store.Store.Claim).
-- KEYS[1] record key. ARGV[1] owner, ARGV[2] route, ARGV[3] idempotency key,
-- ARGV[4] fingerprint, ARGV[5] token, ARGV[6] lease ms (> 0),
-- ARGV[7] retention ms (0 = forever), ARGV[8] "1" = no takeover,
-- ARGV[9] fingerprint recipe, ARGV[10] (optional) the running record of
-- layout 4 or 5 up to its numbers (running4Head, running5Head): the record
-- is then written as a string of that layout instead of a hash.
-- Returns {"claimed", fingerprint, lease_end_ms, takeover "1"/"0", recipe} |
-- {"running"|"abandoned", fingerprint, lease_end_ms, recipe} |
-- {"gone"} for a tombstone (Store.Tombstone; never claimable until its end) |
-- {"completed", fingerprint, status, headers, body, omitted, stored_at_ms, recipe, trailers}
-- for a record completed in layout 1 or 2 | {"completed", record} for one
-- completed in layout 3, record being its fields p0 .. p(pn-1) joined |
-- {"completed4", record, expiry_ms} for a record of layout 4 (a string),
-- expiry_ms its PEXPIRETIME (-1 = none).
-- A record of layout 1 has no "fr" field: its recipe is returned as nil; a
-- record completed without trailers (or before they were kept) has no "tr":
-- nil too.
-- It may write, so a full server (maxmemory) refuses it with -OOM before it
-- runs: under noeviction it applies completely or not at all.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HMGET', key, 's', 'f', 't', 'l', 'x', 'tk', 'fr', 'pn')
local v4 = false
if rec.err then
  -- Layout 4: the record is a string (WRONGTYPE for HMGET).
  local v = redis.call('GET', key)
  local e = redis.call('PEXPIRETIME', key)
  if string.sub(v, 1, 2) == '4c' then
    return {'completed4', v, string.format('%.0f', e)}
  end
  -- Running: token, owner, scope, key, fingerprint, recipe, then the numbers
  -- (layout 5 adds its expiry and the waiters' mark).
  local five = string.sub(v, 1, 2) == '5r'
  local f = {}
  local pos = 3
  for i = 1, 6 do
    local colon = string.find(v, ':', pos, true)
    local n = colon and tonumber(string.sub(v, pos, colon - 1))
    if (string.sub(v, 1, 2) ~= '4r' and not five) or not n then
      return redis.error_reply('claim.lua: layout 4 record does not parse')
    end
    f[i] = string.sub(v, colon + 1, colon + n)
    pos = colon + n + 1
  end
  local rt, gap, age, tk, mark
  if five then
    rt, gap, age, tk, mark = string.match(v, '^ (%d+) (%d+) (%d+) ([01]) %d+ ([01])$', pos)
  else
    rt, gap, age, tk = string.match(v, '^ (%d+) (%d+) (%d+) ([01])$', pos)
  end
  if not tk then
    return redis.error_reply('claim.lua: layout 4 record does not parse')
  end
  v4 = {head = string.sub(v, 1, pos - 1), rt = rt, age = tonumber(age), mark = mark}
  rec = {'running', f[5], f[1], string.format('%.0f', e - tonumber(gap)), e, tk, f[6], false}
end
local state = rec[1]
if state and tonumber(rec[5]) ~= 0 and tonumber(rec[5]) <= now then
  -- Past its end (end <= now): absent, whatever the key's own TTL says.
  state = false
end
local takeover = '0'
local repeated = false
if state == 'gone' then
  return {'gone'}
elseif state == 'completed' and rec[8] then
  -- Layout 3: the whole completed record is in its p fields.
  local names = {}
  for i = 0, tonumber(rec[8]) - 1 do
    names[#names + 1] = 'p' .. i
  end
  return {'completed', table.concat(redis.call('HMGET', key, unpack(names)))}
elseif state == 'completed' then
  local r = redis.call('HMGET', key, 'f', 'st', 'h', 'b', 'om', 'sa', 'tr')
  return {'completed', r[1], r[2], r[3], r[4], r[5], r[6], rec[7], r[7]}
elseif state == 'running' then
  if rec[3] == ARGV[5] then
    -- The same claim again (a retry whose first reply was lost): it holds the
    -- record, and its lease restarts now (below).
    repeated = true
  elseif tonumber(rec[4]) > now then
    return {'running', rec[2], rec[4], rec[7]}
  elseif ARGV[8] == '1' or rec[2] ~= ARGV[4] then
    return {'abandoned', rec[2], rec[4], rec[7]}
  else
    takeover = '1'
  end
end
-- Numbers go to redis.call as they are: Valkey writes an integral number as
-- its plain decimal digits (fpconv), the same bytes string.format('%.0f')
-- made, without the sprintf that was a seventh of the server's CPU per
-- fresh key. Only the reply keeps string.format: it must be a string.
local lease_end = now + tonumber(ARGV[6])
local retention = tonumber(ARGV[7])
local expiry
if retention > 0 then
  expiry = math.max(lease_end, now + retention)
else
  expiry = lease_end + ABANDONED_KEEP_MS
end
if repeated then
  -- Lease end and expiry as a fresh claim's, the expiry never earlier.
  expiry = math.max(expiry, tonumber(rec[5]))
  if v4 then
    local created = tonumber(rec[5]) - v4.age
    local tail = string.format(' %s %.0f %.0f %s', v4.rt, expiry - lease_end, expiry - created, rec[6])
    if v4.mark then
      -- Layout 5: its expiry moves with the key's; a waiter's mark stays.
      tail = tail .. string.format(' %.0f %s', expiry, v4.mark)
    end
    redis.call('SET', key, v4.head .. tail, 'PXAT', expiry)
    return {'claimed', rec[2], string.format('%.0f', lease_end), rec[6], rec[7]}
  end
  redis.call('HSET', key, 'l', lease_end, 'x', expiry)
  redis.call('PEXPIREAT', key, expiry)
  return {'claimed', rec[2], string.format('%.0f', lease_end), rec[6], rec[7]}
end
if ARGV[10] then
  -- Layout 4 or 5: SET replaces whatever the key held, hash or string.
  local tail = string.format(' %s %.0f %.0f %s', ARGV[7], expiry - lease_end, expiry - now, takeover)
  if string.sub(ARGV[10], 1, 2) == '5r' then
    -- Layout 5: its expiry, and the mark that makes its completion
    -- PUBLISH. A takeover sets it: the old record's waiters may not have
    -- marked this one yet.
    local mark = '0'
    if takeover == '1' or (v4 and v4.mark == '1') then
      mark = '1'
    end
    tail = tail .. string.format(' %.0f %s', expiry, mark)
  end
  redis.call('SET', key, ARGV[10] .. tail, 'PXAT', expiry)
  return {'claimed', ARGV[4], string.format('%.0f', lease_end), takeover, ARGV[9]}
end
if v4 then
  -- A string of layout 4 cannot take hash fields: it goes first (this
  -- script may write, so a full server refused it before it ran).
  redis.call('DEL', key)
end
redis.call('HSET', key, 'o', ARGV[1], 'r', ARGV[2], 'k', ARGV[3], 's', 'running',
  'f', ARGV[4], 't', ARGV[5], 'tk', takeover, 'c', now,
  'l', lease_end, 'x', expiry, 'rt', ARGV[7],
  'v', '3', 'fr', ARGV[9])
if rec[1] and not v4 then
  -- An old record (expired, or taken over) is overwritten, never deleted
  -- first: its fields not written above go only after the write went through.
  local old = {'st', 'h', 'b', 'om', 'sa', 'ct', 'ca', 'tr', 'pn'}
  for i = 0, (tonumber(rec[8]) or 0) - 1 do
    old[#old + 1] = 'p' .. i
  end
  redis.call('HDEL', key, unpack(old))
end
redis.call('PEXPIREAT', key, expiry)
return {'claimed', ARGV[4], string.format('%.0f', lease_end), takeover, ARGV[9]}
