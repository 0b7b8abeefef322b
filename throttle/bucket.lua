-- bucket.lua: one atomic step of a geotoll token bucket.
--
-- KEYS[1]  the bucket: a hash {tokens, ts}, ts in Unix seconds
-- ARGV[1]  rate      tokens added per second, finite, > 0
-- ARGV[2]  capacity  most tokens the bucket holds, finite, > 0
-- ARGV[3]  cost      tokens to withdraw: 0 < cost <= capacity ("spend"),
--                    or to give back ("refund"); ignored by "peek"
-- ARGV[4]  mode      "spend", "peek" or "refund"
-- ARGV[5]  not_after optional, "spend" only: Unix time in seconds after which
--                    the spend must do nothing. The caller has given up by
--                    then and may have charged a fallback bucket instead; a
--                    spend that waited in a paused Redis's socket buffer must
--                    not charge a second time when Redis resumes.
--
-- "refund" undoes a spend whose request was refused elsewhere (by the global
-- bucket or the in-flight cap): it adds cost back, capped at capacity. A
-- missing bucket is a full one, so a refund to it writes nothing.
--
-- Reply: {allowed (1|0), remaining (string, "%.17g"), retry_after_ms, reset_ms}
--
-- The arithmetic is mirrored operation for operation by step() in bucket.go;
-- change both together (the integration tests compare them).

-- Redis < 5 replicates scripts verbatim unless told to replicate effects;
-- TIME followed by a write is then refused. Newer Redis always replicates
-- effects and keeps the function as a no-op (or drops it).
if redis.replicate_commands then
  redis.replicate_commands()
end

local function number(i, name)
  local v = tonumber(ARGV[i])
  -- tonumber accepts "nan" and "inf" (strtod): refuse them too.
  if v == nil or v ~= v or v == math.huge or v == -math.huge then
    return nil, 'ERR geotoll bucket: ' .. name .. ' must be a finite number, got ' .. tostring(ARGV[i])
  end
  return v
end

local rate, err = number(1, 'rate')
if not rate then return redis.error_reply(err) end
local capacity
capacity, err = number(2, 'capacity')
if not capacity then return redis.error_reply(err) end
local cost
cost, err = number(3, 'cost')
if not cost then return redis.error_reply(err) end
local mode = ARGV[4]

if rate <= 0 then return redis.error_reply('ERR geotoll bucket: rate must be > 0') end
if capacity <= 0 then return redis.error_reply('ERR geotoll bucket: capacity must be > 0') end
if mode == 'peek' then
  cost = 0
elseif mode == 'spend' or mode == 'refund' then
  if cost <= 0 or cost > capacity then
    return redis.error_reply('ERR geotoll bucket: cost must be > 0 and <= capacity')
  end
else
  return redis.error_reply('ERR geotoll bucket: mode must be "spend", "peek" or "refund"')
end

-- The clock is Redis's, read inside the script: every replica of geotoll
-- refills the bucket from the same clock, however far apart their own drift.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

if mode == 'spend' and ARGV[5] ~= nil and ARGV[5] ~= '' then
  local not_after
  not_after, err = number(5, 'not_after')
  if not not_after then return redis.error_reply(err) end
  if now > not_after then
    -- Nothing is read or written: the caller stopped waiting for this answer.
    return redis.error_reply('GEOTOLL_LATE geotoll bucket: the spend reached Redis after its deadline; nothing was charged')
  end
end

local key = KEYS[1]
local state = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
-- A missing bucket, or a corrupt one, is a full bucket as of now.
if tokens == nil or ts == nil or tokens ~= tokens or ts ~= ts then
  tokens = capacity
  ts = now
end
if tokens < 0 then tokens = 0 end
if tokens > capacity then tokens = capacity end
local elapsed = now - ts
if not (elapsed > 0) then elapsed = 0 end -- a clock that stepped back refills nothing
tokens = tokens + elapsed * rate
if tokens > capacity then tokens = capacity end

if mode == 'refund' then
  if state[1] then
    tokens = tokens + cost
    if tokens > capacity then tokens = capacity end
    redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.17g', now))
    redis.call('PEXPIRE', key, string.format('%.0f', math.ceil(capacity / rate * 1000)))
  end
  return {1, string.format('%.17g', tokens), 0, math.ceil((capacity - tokens) / rate * 1000)}
end

local allowed = tokens >= cost
local retry_ms = 0
if allowed then
  if cost > 0 then
    tokens = tokens - cost
    -- Numbers passed to redis.call are formatted with "%.14g"; format them
    -- ourselves so the stored state round-trips exactly.
    redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.17g', now))
    -- Idle buckets vanish once they could have refilled from empty: a
    -- missing bucket is a full one, so nothing is lost.
    redis.call('PEXPIRE', key, string.format('%.0f', math.ceil(capacity / rate * 1000)))
  end
else
  -- A rejection writes nothing: the refill is linear and was not capped
  -- (tokens < cost <= capacity), so recomputing it later from the old state
  -- gives the same tokens, and an unknown key is never created.
  retry_ms = math.ceil((cost - tokens) / rate * 1000)
  if retry_ms < 1 then retry_ms = 1 end
end
local reset_ms = math.ceil((capacity - tokens) / rate * 1000)

-- Lua numbers become integers in replies, so remaining goes back as a string.
return {allowed and 1 or 0, string.format('%.17g', tokens), retry_ms, reset_ms}
