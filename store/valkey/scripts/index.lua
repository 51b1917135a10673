#!lua
-- index.lua: remember a completed record at a resource (store.Store.Index).
-- KEYS[1] index key. ARGV[1] member: the record key's hash tag (64 hex digits)
-- ':' the stored-at ms of the completion indexed, ARGV[2] the record's expiry
-- ms (0 = never).
-- Returns 1 when the entry is in the index, 0 when the record's end had passed.
-- Members are scored by their record's expiry (+inf for 0); expired members
-- are dropped on each run, and the key expires with its latest member.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now))
local score = ARGV[2]
if tonumber(score) == 0 then
  score = '+inf'
elseif tonumber(score) <= now then
  return 0
end
redis.call('ZADD', key, score, ARGV[1])
if redis.call('ZCOUNT', key, '+inf', '+inf') > 0 then
  redis.call('PERSIST', key)
else
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(top[2])))
end
return 1
