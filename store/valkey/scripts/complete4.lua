#!lua
-- complete4.lua: store the completed record of layout 4 while the record holds the token (store.Store.Complete).
-- KEYS[1] record key. ARGV[1] "4r" ns(token), the start of the running
-- record the token holds; ARGV[2] the completed record, built by idemgate;
-- ARGV[3] retention ms (0 = keep it forever); ARGV[4] events channel;
-- ARGV[5] "4c" ns(token), the start of the record that token completed;
-- ARGV[6] "1" = a repeat by the token that completed the record re-confirms it.
-- Returns 1 when completed (or re-confirmed), 0 when the token does not
-- hold the record, 2 when the record is a hash (layouts 1 to 3: complete.lua's).
-- Nothing is built here: the token is compared with the record's first
-- bytes, and SET replaces the record (and its expiry) whole.
local key = KEYS[1]
local v = redis.pcall('GET', key)
if type(v) == 'table' and v.err then
  return 2
end
if not v then
  return 0
end
local prefix = string.sub(v, 1, #ARGV[1])
if prefix ~= ARGV[1] then
  if ARGV[6] == '1' and string.sub(v, 1, #ARGV[5]) == ARGV[5] then
    -- A repeat whose acknowledgement the caller waits for: write the record
    -- again so that the WAIT after this script covers the completion too.
    redis.call('SET', key, v, 'KEEPTTL')
    return 1
  end
  return 0
end
if ARGV[3] == '0' then
  redis.call('SET', key, ARGV[2])
else
  redis.call('SET', key, ARGV[2], 'PX', ARGV[3])
end
redis.call('PUBLISH', ARGV[4], key)
return 1
