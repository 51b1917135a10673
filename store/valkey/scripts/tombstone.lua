#!lua
-- tombstone.lua: turn one completed record into a tombstone (store.Store.Tombstone).
-- KEYS[1] record key. ARGV[1] stored-at ms of the completion the index entry
-- saw, ARGV[2] events channel.
-- Returns 1 when the record became a tombstone, 0 when it is absent, past its
-- end, not completed (running, or a tombstone already), or completed at
-- another time than ARGV[1] (a later record of the same identity).
-- The tombstone keeps s = gone, x (and the key's expiry), o, r, k, c and v;
-- fingerprint, recipe and response are dropped.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HMGET', key, 's', 'x', 'pn', 'o', 'r', 'k', 'c', 'sa')
if rec.err then
  -- Layout 4 (a string): "4c" then the netstrings token, retention, owner,
  -- scope, key, fingerprint, recipe, created, stored at (estimates, moved
  -- to PEXPIRETIME - retention when there is one, as Go reads them).
  local v = redis.call('GET', key)
  if string.sub(v, 1, 2) ~= '4c' then
    return 0
  end
  local f = {}
  local pos = 3
  for i = 1, 9 do
    local colon = string.find(v, ':', pos, true)
    if not colon then
      return redis.error_reply('tombstone.lua: layout 4 record does not parse')
    end
    local n = tonumber(string.sub(v, pos, colon - 1))
    f[i] = string.sub(v, colon + 1, colon + n)
    pos = colon + n + 1
  end
  local e = redis.call('PEXPIRETIME', key)
  local created, sa = tonumber(f[8]), tonumber(f[9])
  if tonumber(f[2]) > 0 and e > 0 then
    created = created + (e - tonumber(f[2])) - sa
    sa = e - tonumber(f[2])
  end
  if string.format('%.0f', sa) ~= ARGV[1] then
    return 0
  end
  local x = 0
  if e > 0 then
    x = e
  end
  redis.call('DEL', key)
  redis.call('HSET', key, 's', 'gone', 'x', x, 'o', f[3], 'r', f[4], 'k', f[5], 'c', created, 'v', '3')
  if x ~= 0 then
    redis.call('PEXPIREAT', key, x)
  end
  redis.call('PUBLISH', ARGV[2], key)
  return 1
end
if rec[1] ~= 'completed' then
  return 0
end
local expiry = tonumber(rec[2])
if expiry ~= 0 and expiry <= now then
  redis.call('DEL', key)
  return 0
end
local o, r, k, c, sa = rec[4], rec[5], rec[6], rec[7], rec[8]
if rec[3] then
  -- Layout 3: identity, created and stored at are the record's netstrings
  -- 1-3, 6 and 7.
  local names = {}
  for i = 0, tonumber(rec[3]) - 1 do
    names[#names + 1] = 'p' .. i
  end
  local b = table.concat(redis.call('HMGET', key, unpack(names)))
  local v = {}
  local pos = 1
  for i = 1, 7 do
    local colon = string.find(b, ':', pos, true)
    if not colon then
      return redis.error_reply('tombstone.lua: layout 3 record does not parse')
    end
    local n = tonumber(string.sub(b, pos, colon - 1))
    v[i] = string.sub(b, colon + 1, colon + n)
    pos = colon + n + 1
  end
  o, r, k, c, sa = v[1], v[2], v[3], v[6], v[7]
end
if sa ~= ARGV[1] then
  return 0
end
redis.call('DEL', key)
redis.call('HSET', key, 's', 'gone', 'x', rec[2], 'o', o, 'r', r, 'k', k, 'c', c or '0', 'v', '3')
if expiry ~= 0 then
  redis.call('PEXPIREAT', key, rec[2])
end
redis.call('PUBLISH', ARGV[2], key)
return 1
