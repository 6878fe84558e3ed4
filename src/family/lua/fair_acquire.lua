-- A fair lock's acquire (fair_line.lua first).
-- - The key holds this request's grant value (a release, a rollback or a refusal granted it
--   the key), or its hand-off value from an earlier round than this attempt's (its client's
--   release handed it the lock while it waited, and the hand-off did not happen, since it
--   attempts again), or this attempt's own value (a re-sent attempt): set to this attempt's
--   value for the TTL from now, which the attempt's start bounds from below, and yes. This
--   is how a waiter claims a grant. Another attempt's value, or a hand-off value of this
--   round or a later one, counts as held: an attempt that lands late (written on a
--   connection since replaced) then changes nothing that a later attempt or a handed-over
--   guard counts on, and its rollback, landing after it, finds nothing of its own.
-- - Without a ticket (a request's first attempt): yes only when the key is free and nobody
--   waits; SET key holder PX ttl. Refused, a request that will wait (ARGV[4] "?") draws its
--   ticket at once: the node's INCR of the counter is in the answer, and the largest of a
--   quorum of them is the ticket (one round trip sooner than a draw of its own). The counter
--   then lives at least a queue lease (a waiter that dies before joining leaves none).
-- - With a ticket: the counter is raised to it (every later ticket, drawn from a quorum that
--   meets this attempt's, is larger), the waiter joins the line at its ticket (or keeps its
--   place) and renews its queue lease; yes when the key is free and it is the first live
--   waiter.
-- A refusal that finds the key free grants it to the first live waiter (a short grant, as a
-- release would): the key is free without a release when the grant before lapsed or a
-- holder's entry expired, and the next waiter's claim window must start then. A refusal
-- carries the key's remaining TTL, after which the key may be free: the waiter tries again
-- no later.
--
-- KEYS as fair_line.lua. ARGV[1] the attempt's holder value, ARGV[2] TTL in ms, ARGV[3] the
-- request's waiter id, ARGV[4] its ticket (empty: none, and none drawn; "?": none yet, drawn if
-- refused), ARGV[5] the queue lease in ms, ARGV[6] the claim window in ms, ARGV[7] the
-- release channel, ARGV[8] the attempt's round (counted from 1 within a request).
-- Reply: 1, or {0, the ticket drawn or 0, the key's PTTL}.
local current = redis.call('get', KEYS[1])
local base = base_of(ARGV[1])
local function claimable(value)
  if not value then
    return false
  end
  if value == ARGV[1] or value == base .. ':g' then
    return true
  end
  local handed = base .. ':h'
  if string.sub(value, 1, #handed) ~= handed then
    return false
  end
  local round = tonumber(string.sub(value, #handed + 1))
  return round ~= nil and round < tonumber(ARGV[8])
end
if claimable(current) then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
local function refuse(drawn)
  -- A free key whose first live waiter is someone else: that waiter's turn has come
  -- without a release to grant it (its predecessor's grant lapsed, or a holder's entry
  -- expired). Grant it now, so that its claim window starts, rather than leave the key free
  -- with nobody allowed to take it.
  if not current then
    grant(ARGV[7], redis.sha1hex(ARGV[1]), {})
  end
  return {0, drawn, redis.call('pttl', KEYS[1])}
end
if ARGV[4] == '' or ARGV[4] == '?' then
  if current or first_live() then
    if ARGV[4] == '?' then
      local n = redis.call('incr', KEYS[5])
      if redis.call('pttl', KEYS[5]) < tonumber(ARGV[5]) then
        redis.call('pexpire', KEYS[5], ARGV[5])
      end
      return refuse(n)
    end
    return refuse(0)
  end
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if tonumber(redis.call('get', KEYS[5]) or '0') < tonumber(ARGV[4]) then
  redis.call('set', KEYS[5], ARGV[4])
end
redis.call('zadd', KEYS[2], 'NX', ARGV[4], ARGV[3])
redis.call('zadd', KEYS[3], now + tonumber(ARGV[5]), ARGV[3])
redis.call('hset', KEYS[4], ARGV[3],
  ARGV[2] .. ' ' .. ARGV[6] .. ' ' .. base .. ' ' .. ARGV[8] .. ' ' .. now)
keep_line()
if current or first_live() ~= ARGV[3] then
  return refuse(0)
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
