#!lua
-- complete.lua: store the response while the record holds the token (store.Store.Complete).
-- KEYS[1] record key. ARGV[1] token, ARGV[2] status, ARGV[3] headers
-- (encoded), ARGV[4] body, ARGV[5] omitted "1"/"0", ARGV[6] events channel,
-- ARGV[7] "1" = a repeat by the token that completed the record re-confirms it,
-- ARGV[8] trailers (encoded like the headers; "" = none, and no 'tr' field).
-- Returns 1 when completed (or re-confirmed), 0 when the token does not hold the record.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', key, 's', 't', 'x', 'rt', 'ct')
if not rec[1] then
  return 0
end
if tonumber(rec[3]) ~= 0 and tonumber(rec[3]) <= now then
  redis.call('DEL', key)
  return 0
end
if rec[1] == 'completed' and ARGV[7] == '1' and rec[5] == ARGV[1] then
  -- A repeat whose acknowledgement the caller waits for: write a marker so
  -- that the WAIT after this script covers the completion too.
  redis.call('HSET', key, 'ca', string.format('%.0f', now))
  return 1
end
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local retention = tonumber(rec[4])
local expiry = 0
if retention > 0 then
  expiry = now + retention
end
-- Write first, then delete: a write refused for memory leaves the record as it was.
local fields = {'s', 'completed', 'st', ARGV[2], 'h', ARGV[3], 'b', ARGV[4],
  'om', ARGV[5], 'sa', string.format('%.0f', now), 'x', string.format('%.0f', expiry), 'ct', ARGV[1]}
if ARGV[8] ~= '' then
  fields[#fields + 1] = 'tr'
  fields[#fields + 1] = ARGV[8]
end
redis.call('HSET', key, unpack(fields))
redis.call('HDEL', key, 't', 'tk', 'l')
if retention > 0 then
  redis.call('PEXPIREAT', key, string.format('%.0f', expiry))
else
  redis.call('PERSIST', key)
end
redis.call('PUBLISH', ARGV[6], key)
return 1
