-- inflight.lua: a per-client cap on concurrent requests (Stripe's
-- "concurrent requests limiter").
--
-- KEYS[1]  a sorted set of the client's in-flight request ids, scored by the
--          time (ms) at which each is presumed dead
-- ARGV[1]  mode  "acquire" or "release"
-- ARGV[2]  id    the request's unique id
-- ARGV[3]  max   most requests in flight (acquire)
-- ARGV[4]  ttl   ms after which an unreleased slot is presumed dead
--                (the process that held it crashed): the request timeout
-- ARGV[5]  not_after  optional (acquire): Unix time in ms after which the
--                caller has stopped waiting; a later acquire takes nothing
--                (like bucket.lua's), so no slot lingers for a request that
--                never ran
--
-- Reply (acquire): {acquired (1|0), requests in flight now}
-- Reply (release): {1, requests in flight now}
if redis.replicate_commands then
  redis.replicate_commands()
end

local key, mode, id = KEYS[1], ARGV[1], ARGV[2]
if mode == 'release' then
  redis.call('ZREM', key, id)
  return {1, redis.call('ZCARD', key)}
end
if mode ~= 'acquire' then
  return redis.error_reply('ERR geotoll inflight: mode must be "acquire" or "release"')
end
local max, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if max == nil or max < 1 or ttl == nil or ttl < 1 or ttl ~= ttl or ttl == math.huge then
  return redis.error_reply('ERR geotoll inflight: max and ttl must be positive numbers')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local not_after = tonumber(ARGV[5])
if not_after ~= nil and now > not_after then
  return redis.error_reply('GEOTOLL_LATE geotoll inflight: the acquire reached Redis after its deadline; no slot was taken')
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local n = redis.call('ZCARD', key)
if n >= max then
  return {0, n}
end
redis.call('ZADD', key, now + ttl, id)
redis.call('PEXPIRE', key, string.format('%.0f', ttl))
return {1, n + 1}
