#!lua
-- admit.lua: one atomic batch of operations on one caller's budget.
--
-- geotoll sends one batch per caller at a time and lets the requests that
-- arrive meanwhile ride on the next one, so a burst of requests shares one
-- call; the finishes (settlement and release) of earlier requests ride
-- along too. The script is written for Redis's CPU (measured in
-- instructions with callgrind): amounts are integers in micro-tokens, so
-- nothing is formatted as a float; the clock is kept as TIME's own
-- strings; keys' expiries are only pushed out when they must be; the open
-- requests live in a hash, so no list is parsed or rebuilt per call.
--
-- Amounts (tokens, costs, deltas, rates per second) are integers in
-- micro-tokens (1 token = 1,000,000), each at most 2^53, exact in a
-- double. Only the bucket's least (-floor less what is leased, below)
-- may go beyond: down to -(floor + capacity), 2^54 at most, where whole
-- numbers past 2^53 round to even ones. geotoll's Go twin (applyBatch)
-- does the same operations in the same order on the same doubles, so
-- both round alike.
--
-- KEYS[1]  the bucket: "<utokens> <sec> <usec> <expires_ms> <open_expires_ms>
--          <n> <voids_until_ms>[ <leased> <leased_until_ms>]": tokens as of
--          TIME (sec, usec), the key's own expiry, that of KEYS[2], how many
--          requests are open, until when KEYS[3] may hold tombstones, and
--          the micro-tokens out on leases (L) and until when they may be
--          out — the last two absent when nothing is leased, and nothing
--          is once the clock reaches leased_until. Every increase of the
--          bucket (refill, refunds, replays, give-backs) stops at capacity
--          less what is leased, and every debit at -floor less what is
--          leased: the bucket and its leases together never hold more than
--          the capacity, nor owe more than floor, whichever replica
--          settles. When a lease stops counting, the floor rises by what
--          it paid: its give-back's refund (the first of its replay)
--          brings the bucket up by as much first, and a bucket still below
--          the floor after the F, V or M that closed the lease, or once
--          leased_until has passed (a lease that gave back less than it
--          took, or never came back), is lifted to it — where a request
--          that paid the same and never finished leaves it, but for
--          refill: a bucket loaded after leased_until is lifted as of its
--          last write, so refill written while the lease still counted
--          (between a debt beside it and a later write) went to a bucket
--          below the floor, and up to what the lease held of it is lost
--          (the caller loses, never gains); until the lease stops counting,
--          other replicas see that extra debt. (An L's recount happens
--          only when the bucket pays the L: above any floor.)
-- KEYS[2]  the open requests: a hash id -> "<paid> <expires_ms>", a
--          lease's "<paid> <expires_ms> L"
-- KEYS[3]  tombstones: a hash of voided ids that were not open, so that
--          their admit, should it still come, admits nothing; they hold
--          until voids_until, and the hash expires a second after that
--          (PEXPIREAT at a moment the clock has reached deletes a key at
--          once, and a loaded server reaches voids_until = TIME + 1 ms
--          while the script still runs)
-- KEYS[4]  optional: an aggregate bucket (e.g. an IPv6 /48 above each
--          /64), same format; every amount spent, settled or refunded
--          applies to it too
-- All keys share one hash tag, so Redis Cluster keeps them in one slot.
-- ARGV[1]  rate      micro-tokens added per second (> 0)
-- ARGV[2]  capacity  most micro-tokens the bucket holds (> 0)
-- ARGV[3]  floor     debt bound: a settlement may take it down to -floor
-- ARGV[4]  rate, ARGV[5] capacity of KEYS[4] ("" without it)
-- ARGV[6]  max       most requests open at once (the in-flight cap)
-- ARGV[7]  ttl_ms    how long an admitted request stays open unless
--                    finished (its process may have died)
-- ARGV[8]  not_after Unix ms after which the caller stopped waiting for this
--                    batch ("" = none): a later batch admits nothing
-- ARGV[9…] operations, 3 fields each — kind, id, amount:
--   "A" id cost  admit: spend cost iff the bucket (and the aggregate) hold
--                it and fewer than max requests are open; then id is open
--   "S" id cost  shadow admit: as A, but an empty bucket does not refuse
--                (then nothing is spent); the in-flight cap still does
--   "L" id cost  lease: as A, and what it spends is leased — counted out
--                on leases (after recounting those still open when some
--                are) until its F, V or M, which takes what it paid off the
--                leased amount before settling or replaying, so that what
--                it hands back can fill the bucket again; or, once its
--                open entry has expired, until the next L's recount or
--                leased_until. An F, V or M that comes that late takes
--                nothing off and refunds nothing — once the bucket's top
--                and floor no longer count the lease, it may refill to
--                its capacity and a debt the lease held is lifted to the
--                floor, so a refund could give the lease's tokens back
--                twice — and of an F's or M's replay and delta only their
--                sum, if a debit, is debited, now
--   "F" id delta finish: close id and settle its price: delta > 0 debits
--                (down to -floor less what is leased; a bucket already
--                there loses nothing more), delta < 0 refunds (geotoll
--                never sends a refund above what the request paid: it
--                knows the price)
--   "V" id keep  void: close id and refund all it paid (its caller never
--                learnt it was admitted, and was decided elsewhere); open
--                or not, leave a tombstone until the Unix ms "keep" (the
--                voided batch's not_after), so that the admit, should it
--                still come (again), admits nothing
--   "M" id delta move: close id and settle delta as F does, and open
--                id.."+" in its place, having paid nothing, for ttl_ms —
--                no token or cap check: the request id held stays open
--                under the new id (a lease hands its tokens back and keeps
--                its running request's slot); nothing if id.."+" is open
--   "P" "" ""    peek: report the bucket
--   F and M take a replay in their amount, "<delta>|<d>:<ago>,<d>:<ago>…":
--   settlements made in process on a lease (d micro-tokens, debit > 0,
--   refund < 0, ago µs before now), applied in order at the moments they
--   happened — never before the bucket's own time — with the refill in
--   between, before delta — only when the F or M closes its id, so that a
--   copy of it (a resend) replays nothing. An L's id stops counting as
--   leased before its replay: a token lease's give-back replays the
--   refund of what it took, as of when it took it, then what it admitted.
--   F, V and M of an id that is not open do nothing, so a repeated or late
--   one never settles twice. Ids are geotoll's own (hex), never client text.
--
-- Reply: 2 integers per operation, in order:
--   status   A/S/L: 1 admitted, 0 refused by the bucket, 2 refused by the
--               aggregate, 3 refused by the in-flight cap, 4 already open
--               (admitted by an earlier copy of this batch; 6 if that
--               copy spent nothing, a shadow admission), 5 late (not
--               applied: after not_after, voided already, or invalid),
--               6 shadow (the bucket refused; admitted anyway)
--            F, V, M: 1 applied, 0 not open;  P: 1;  7: not an operation
--            (geotoll validates every operation before sending it; an
--            invalid admit answers 5 and changes nothing)
--   utokens  the bucket's micro-tokens after it — the aggregate's when it
--            refused (status 2). Retry and reset times follow from it, the
--            rate and the cost, with the same arithmetic in Go.
--
-- The "#!lua" line (Redis 7+) makes Redis check its memory before the
-- script runs: at maxmemory (noeviction) a batch is refused whole, even one
-- whose first write would free memory — budgets then follow the fail mode
-- instead of writing past the limit.
--
-- A batch that changes nothing (refusals, peeks, unknown ids) writes
-- nothing, so a caller that is only ever refused never creates a key. The
-- arithmetic is mirrored operation for operation by applyBatch in batch.go;
-- change both together (the integration tests compare them).

-- What the script calls per operation, read once: a local is a register, a
-- global a table lookup.
local rcall, rpcall, errorReply = redis.call, redis.pcall, redis.error_reply
local tonumber, type = tonumber, type
local match, gmatch, find, format = string.match, string.gmatch, string.find, string.format
local mfloor, ceil, huge = math.floor, math.ceil, math.huge
local argv = ARGV

local rate, capacity, floor = tonumber(argv[1]), tonumber(argv[2]), tonumber(argv[3])
local max, ttl, notAfter = tonumber(argv[6]), tonumber(argv[7]), tonumber(argv[8])
if rate == nil or capacity == nil or floor == nil or not (rate > 0 and capacity > 0 and floor >= 0)
    or rate == huge or capacity == huge or floor == huge
    or max == nil or not (max >= 1) or ttl == nil or not (ttl >= 1) or ttl == huge then
  return errorReply('ERR geotoll admit: rate, capacity, max and ttl must be finite and > 0, floor >= 0')
end
local okey, vkey, agg = KEYS[2], KEYS[3], KEYS[4]
if okey == nil or vkey == nil then
  return errorReply('ERR geotoll admit: KEYS[2] and KEYS[3], the open requests and tombstones, are required')
end
local arate, acap
if agg then
  arate, acap = tonumber(argv[4]), tonumber(argv[5])
  if arate == nil or acap == nil or not (arate > 0 and acap > 0) or arate == huge or acap == huge then
    return errorReply('ERR geotoll admit: the aggregate rate and capacity must be finite and > 0')
  end
end
local nargs = #argv
if nargs < 11 or (nargs - 8) % 3 ~= 0 then
  return errorReply('ERR geotoll admit: operations come in groups of 3')
end

-- The clock is Redis's: every geotoll replica refills from the same one.
local t = rcall('TIME')
local sec, usec = t[1], t[2]
local nsec, nusec = tonumber(sec), tonumber(usec)
local nowms = nsec * 1000 + mfloor(nusec / 1000)
local late = notAfter ~= nil and nowms > notAfter
local grace = 1000 -- how long the tombstones' hash outlives voids_until

-- The bucket, clamped to [low, top], as of its own time (at, in
-- µs): advance refills it to a later moment. (A bucket below the floor of
-- a lease that no longer counts is so lifted as of its last write: see
-- KEYS[1].) Every operation sees it
-- refilled to now, but a replay (below) first applies settlements at the
-- moments they happened. A missing, corrupt or foreign value (an older
-- version's hash: WRONGTYPE) is a full bucket with nothing open.
local nowus = nsec * 1000000 + nusec
local raw = rpcall('GET', KEYS[1])
-- leased: the micro-tokens out on leases, until luntil (Unix ms); top:
-- the most the bucket holds meanwhile, and low the least (its debt floor
-- less what is leased: the bucket and its leases together never owe more
-- than floor).
local tokens, at, expires, oexpires, n, voids, exists = capacity, nowus, 0, 0, 0, 0, false
local leased, luntil, top, low = 0, 0, capacity, -floor
if type(raw) == 'string' then
  local a, b, c, d, e, f, g = match(raw, '^(%S+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  local l, u = nil, nil
  if not a then -- with what is leased: parsed only then
    a, b, c, d, e, f, g, l, u = match(raw, '^(%S+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  end
  local tok, ts, tu = tonumber(a), tonumber(b), tonumber(c)
  if tok and ts and tu and tok == tok then
    tokens, expires, oexpires, n, voids, exists = tok, tonumber(d), tonumber(e), tonumber(f), tonumber(g), true
    if l then
      l, u = tonumber(l), tonumber(u)
      if u > nowms then
        if l > capacity then l = capacity end
        leased, luntil, top, low = l, u, capacity - l, -floor - l
      end
    end
    if tokens < low then tokens = low end
    if tokens > top then tokens = top end
    at = ts * 1000000 + tu
  end
end
local function advance(to)
  local el = to - at
  if el > 0 then -- a clock that stepped back refills nothing
    tokens = tokens + mfloor(el * rate / 1000000)
    if tokens > top then tokens = top end
    at = to
  end
end
-- A hash past its time has expired with all it held (Redis: now > expiry).
-- Redis judges a key's expiry by the moment the script started, which a
-- loaded server may put a few milliseconds before TIME: such a hash is
-- deleted here, so that no later call of this script still finds it. A
-- bucket without a value has nothing open: a hash that outlived it (the
-- bucket evicted or deleted by hand) goes too, or an open count of 0
-- would not match what it holds.
local swept = false -- whether this call swept the open hash (below)
if oexpires < nowms then
  n = 0
  if oexpires > 0 or not exists then rcall('DEL', okey) end
end
if voids < nowms then
  if voids > 0 then rcall('DEL', vkey) end
  voids = 0
end
local atokens, aexpires, aexists = 0, 0, false
if agg then
  atokens = acap
  local araw = rpcall('GET', agg)
  if type(araw) == 'string' then
    local a, b, c, d = match(araw, '^(%S+) (%d+) (%d+) (%d+)')
    local tok, ts, tu = tonumber(a), tonumber(b), tonumber(c)
    if tok and ts and tu and tok == tok then
      atokens, aexpires, aexists = tok, tonumber(d), true
      if atokens < -floor then atokens = -floor end
      if atokens > acap then atokens = acap end
      local el = (nsec - ts) * 1000000 + (nusec - tu)
      if el > 0 then
        atokens = atokens + mfloor(el * arate / 1000000)
        if atokens > acap then atokens = acap end
      end
    end
  end
end

-- bury leaves a tombstone of id until keep (Unix ms): its admit, should it
-- still come, admits nothing.
local function bury(id, keep)
  rcall('HSET', vkey, id, '1')
  if keep > voids then
    voids = keep
    rcall('PEXPIREAT', vkey, format('%d', keep + grace))
  end
end

local expstr = nil -- " <expires_ms>" of a request opened now
-- opened: a request was opened; fresh: one was opened into an empty hash,
-- which Redis had deleted with its expiry (it deletes an emptied hash),
-- so the hash made again has none until this script sets it.
local dirty, opened, fresh = false, false, false
local out, o = {}, 0
for i = 9, nargs, 3 do
  local kind, id = argv[i], argv[i + 1]
  local status, value = 1, nil
  local amount, replay = argv[i + 2], nil
  if (kind == 'F' or kind == 'M') and find(amount, '|', 1, true) then
    amount, replay = match(amount, '^([^|]*)|(.*)$')
  elseif at < nowus then
    advance(nowus)
  end
  if kind == 'A' or kind == 'S' or kind == 'L' then
    local cost = tonumber(argv[i + 2])
    -- An invalid admit is answered as late and changes nothing: an error
    -- reply here would leave the batch's earlier writes half done.
    local invalid = cost == nil or not (cost > 0 and cost <= capacity) or id == ''
    if invalid then cost = 0 end
    local own = tokens >= cost
    local whole = (not agg) or atokens >= cost
    local shadow = kind == 'S'
    if late or invalid then
      status = 5
    elseif not own and not shadow then
      status = 0
      -- Neither can pay: the longer wait is the request's Retry-After.
      if not whole and (cost - atokens) * rate > (cost - tokens) * arate then status, value = 2, atokens end
    elseif not whole and not shadow then
      status, value = 2, atokens
    else
      if n >= max and not swept then
        -- Sweep the requests of processes that died before refusing on them
        -- — once a call: nowms stands still within it, so a second sweep
        -- could find nothing the first left, and each reads the whole hash.
        swept = true
        local h, m = rcall('HGETALL', okey), 0
        for j = 1, #h, 2 do
          local x = tonumber(match(h[j + 1], '^%S+ (%d+)'))
          if x and x > nowms then
            m = m + 1
          else
            rcall('HDEL', okey, h[j])
          end
        end
        if m ~= n then n, dirty = m, true end
      end
      if n >= max then
        status = 3
      else
        local spent = argv[i + 2]
        if not (own and whole) then
          status, spent = 6, '0' -- nothing spent, so nothing to give back
        end
        if expstr == nil then expstr = format(' %d', nowms + ttl) end
        local rec = spent .. expstr
        if kind == 'L' then
          rec = rec .. ' L'
          if leased > 0 then
            -- Recount what the open leases paid (those whose entry has not
            -- expired): a replica that died with its lease out stops
            -- counting once its entry expires, though other leases keep
            -- luntil later.
            local h, l, u = rcall('HGETALL', okey), 0, 0
            for j = 1, #h, 2 do
              local p, x = match(h[j + 1], '^(%d+) (%d+) L$')
              p, x = tonumber(p), tonumber(x)
              if p and x and x > nowms then
                l = l + p
                if x > u then u = x end
              end
            end
            -- The bucket holds at least the cost (it pays it), so the
            -- floor that rises here is below it.
            leased, luntil, top, low = l, u, capacity - l, -floor - l
          end
        end
        if nowms <= voids and rcall('HEXISTS', vkey, id) == 1 then
          status = 5 -- voided before it came
        elseif rcall('HSETNX', okey, id, rec) == 0 then
          -- Admitted by an earlier copy of this batch, as that copy was: a
          -- shadow admission that spent nothing stays one.
          status = 4
          if match(rcall('HGET', okey, id) or '', '^0 ') then status = 6 end
        else
          if status == 1 then
            tokens = tokens - cost
            if agg then atokens = atokens - cost end
            if kind == 'L' then
              leased, top, low = leased + cost, top - cost, low - cost
              if nowms + ttl > luntil then luntil = nowms + ttl end
            end
          end
          if n == 0 then fresh = true end
          n = n + 1
          dirty, opened = true, true
        end
      end
    end
    if status == 0 or status == 2 or status == 3 then
      -- A copy of this batch may have been admitted before (its answer
      -- lost), taking the tokens or the slot this copy lacks: as it was.
      local rec = rcall('HGET', okey, id)
      if rec then
        status, value = 4, nil
        if match(rec, '^0 ') then status = 6 end
      end
    end
  elseif kind == 'F' or kind == 'V' or kind == 'M' then
    local delta, give, tomb, skip, after, rec = 0, 0, nil, false, nil, nil
    if kind ~= 'V' then
      delta = tonumber(amount)
      if delta == nil or delta ~= delta or delta == huge or delta == -huge then delta = 0 end
      if delta < 0 then give = -delta end
      skip = kind == 'M' and rcall('HEXISTS', okey, id .. '+') == 1
      -- A lease's entry is read only while something is leased, or for a
      -- replay (a lease's give-back or move).
      if (leased > 0 or replay) and not skip then rec = rcall('HGET', okey, id) end
    else
      rec = rcall('HGET', okey, id)
      if rec then
        give = tonumber(match(rec, '^(%S+)')) or 0
        -- Closed, and a tombstone too: a late copy of its admit (a resend
        -- after the void) admits nothing.
        local keep = tonumber(argv[i + 2])
        if keep ~= nil and keep > nowms then after = keep end
      else
        -- Never admitted, or not yet: a tombstone until the voided batch's
        -- deadline turns away the admit if it arrives after all.
        local keep = tonumber(argv[i + 2])
        if keep ~= nil and keep > nowms then tomb = keep else skip = true end
      end
    end
    local closed = not skip and not tomb and rcall('HDEL', okey, id) == 1
    if closed and rec then
      local p, x = match(rec, '^(%d+) (%d+) L$')
      p, x = tonumber(p), tonumber(x)
      if p and x and x > nowms then
        if leased > 0 then
          -- A lease that is still counted: what it paid is no longer out —
          -- before its replay, which gives it back as of when it was taken.
          leased = leased - p
          if leased <= 0 then leased, luntil = 0, 0 end
          top, low = capacity - leased, -floor - leased
        end
      elseif p and x then
        -- A lease whose entry expired stopped counting, and the floor it
        -- counted in rose to the bucket's own: it refunds nothing (what
        -- it held is lost, as a dead replica's is), and only what its
        -- record overspent is debited, now.
        if replay then
          for d in gmatch(replay, '(-?%d+):%d+') do delta = delta + tonumber(d) end
          replay = nil
        end
        if delta < 0 then delta = 0 end
        give = 0
      end
    end
    if closed and replay then
      -- Each settlement of the replay at the moment it happened (ago µs
      -- before now, never before the bucket's own time), refilling in
      -- between, as if each had been sent then.
      for d, ago in gmatch(replay, '(-?%d+):(%d+)') do
        local x = tonumber(d)
        local when = nowus - tonumber(ago)
        if when > at then advance(when) end
        if x > 0 then
          if tokens > low then -- a debit never lifts a bucket below its floor
            tokens = tokens - x
            if tokens < low then tokens = low end
          end
        elseif x < 0 then
          tokens = tokens - x
          if tokens > top then tokens = top end
        end
        if agg then
          atokens = atokens - x
          if atokens < -floor then atokens = -floor end
          if atokens > acap then atokens = acap end
        end
      end
    end
    advance(nowus)
    if skip then
      status = 0
    elseif tomb then
      bury(id, tomb)
      status, dirty = 0, true
    elseif not closed then
      status = 0
    else
      if kind == 'M' then -- its successor takes the slot
        if expstr == nil then expstr = format(' %d', nowms + ttl) end
        rcall('HSET', okey, id .. '+', '0' .. expstr)
        opened = true
        if n <= 1 then fresh = true end -- it was the last: the hash went and came back
      else
        n = n - 1
      end
      if delta > 0 then
        if tokens > low then
          tokens = tokens - delta
          if tokens < low then tokens = low end
        end
        if agg then
          atokens = atokens - delta
          if atokens < -floor then atokens = -floor end
        end
      end
      if give > 0 then
        tokens = tokens + give
        if tokens > top then tokens = top end
        if agg then
          atokens = atokens + give
          if atokens > acap then atokens = acap end
        end
      end
      -- A lease closed: its debt floor rises by what it paid, which its
      -- refund (or its replay's, first) gave back already, but for a
      -- lease that gives back less than it took.
      if tokens < low then tokens = low end
      if after then bury(id, after) end
      dirty = true
    end
  elseif kind ~= 'P' then
    status = 7 -- not an operation: nothing done
  end
  out[o + 1] = status
  out[o + 2] = value or tokens
  o = o + 2
end

if not dirty then
  return out
end
advance(nowus)
if n < 0 then n = 0 end

-- A key must live until its bucket is full again, and the open hash until
-- its last request has expired — the bucket at least as long as the
-- hashes; then they vanish, which is exactly a full, idle bucket. Expiries
-- are only pushed out — with slack — when they must be, so most writes
-- keep them.
local function later(need)
  local slack = ceil((need - nowms) / 8)
  if slack < 1000 then slack = 1000 end
  return need + slack
end
if n > 0 and opened and (fresh or oexpires <= nowms + ttl) then
  if oexpires <= nowms + ttl then oexpires = later(nowms + ttl) end
  rcall('PEXPIREAT', okey, format('%d', oexpires))
end
if voids < nowms then voids = 0 end
local vexpires = 0
if voids > 0 then vexpires = voids + grace end
local need = nowms + ceil((capacity - tokens) / rate * 1000)
-- Each value is written by one format: no intermediate strings. The
-- leased amount and its time are written only when something is leased.
local bfmt = '%d %s %s %d %d %d %d'
if leased > 0 then bfmt = '%d %s %s %d %d %d %d %d %d' end
if exists and need <= expires and oexpires <= expires and vexpires <= expires then
  rcall('SET', KEYS[1], format(bfmt, tokens, sec, usec, expires, oexpires, n, voids, leased, luntil), 'KEEPTTL')
else
  need = later(need)
  if oexpires > need then need = oexpires end
  if vexpires > need then need = vexpires end
  rcall('SET', KEYS[1], format(bfmt, tokens, sec, usec, need, oexpires, n, voids, leased, luntil), 'PXAT', format('%d', need))
end
if agg then
  local aneed = nowms + ceil((acap - atokens) / arate * 1000)
  if aexists and aneed <= aexpires then
    rcall('SET', agg, format('%d %s %s %d 0 0 0', atokens, sec, usec, aexpires), 'KEEPTTL')
  else
    aneed = later(aneed)
    rcall('SET', agg, format('%d %s %s %d 0 0 0', atokens, sec, usec, aneed), 'PXAT', format('%d', aneed))
  end
end
return out
