#!lua flags=allow-oom
-- release.lua: delete the record while it holds the token (store.Store.Release).
-- KEYS[1] record key. ARGV[1] token, ARGV[2] events channel, ARGV[3] "4r"
-- ns(token), the start of a running record of layout 4 the token holds
-- (of layout 5: the same after "5r").
-- Returns 1 when released, 0 when the token does not hold the record.
-- allow-oom: it only deletes, which frees memory on a full server.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HMGET', key, 's', 't', 'x')
if rec.err then
  -- Layout 4 (a string): the token's running record starts with ARGV[3]
  -- (layout 5: "5r", then the same).
  local v = redis.call('GET', key)
  if string.sub(v, 1, #ARGV[3]) ~= ARGV[3] and
    (string.sub(v, 1, 2) ~= '5r' or string.sub(v, 3, #ARGV[3]) ~= string.sub(ARGV[3], 3)) then
    return 0
  end
  redis.call('DEL', key)
  redis.call('PUBLISH', ARGV[2], key)
  return 1
end
if not rec[1] then
  return 0
end
if tonumber(rec[3]) ~= 0 and tonumber(rec[3]) <= now then
  redis.call('DEL', key)
  return 0
end
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', key)
redis.call('PUBLISH', ARGV[2], key)
return 1
