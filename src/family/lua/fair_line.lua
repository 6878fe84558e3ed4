-- Shared by the fair lock's scripts: its line. KEYS[1] is the key (the holder's entry, as a
-- mutex's), KEYS[2] the line (waiter ids, scored by ticket), KEYS[3] the waiters' queue
-- leases (waiter id, scored by expiry in the node's ms), KEYS[4] what a release needs to hand
-- the key to a waiter (waiter id -> "ttl-ms claim-ms base round at-ms"), KEYS[5] the ticket
-- counter. A waiter is live while its queue lease runs and all three of its entries exist;
-- the expired ones are purged first, so "the first live waiter" is the lowest ticket left
-- (ties broken by waiter id, the same way on every node). A waiter id is its client's tag,
-- a dot, and the request's id.
--
-- Holder values: a fair request's base is `fair:<waiter id>:<secret>` (the line's entry
-- keeps it); each attempt sets the key to a value of its own, `<base>:<nonce>`, a grant to
-- `<base>:g`, and a hand-off by the request's own client to `<base>:h<round>`. Values of one
-- base are the request's: its attempts claim a grant, or a hand-off of an earlier round (see
-- fair_acquire.lua), its release and withdrawal delete any of them; a rollback deletes only
-- its own attempt's value, so that a rollback that lands late (written on a connection that
-- was replaced) never deletes what a later attempt, a grant or a hand-off counts on.
--
-- leave(w): takes waiter w out of the line.
-- keep_line(): keeps the line's keys and the ticket counter until the latest queue lease
--   ends, and deletes them when nobody waits.
-- base_of(holder): the base of a fair holder value (all but its last `:` part).
-- mine(value, base): `value` (the key's, or false) is one of base's values.
-- live(w), owns(w, base): w is live; w's entry has this base.
-- first_live(): the first waiter and its entry, dropping any whose entries are incomplete.
-- next_live(after): the first live waiter behind `after` of another client ('' if none):
--   waiters of the client that did not claim a grant are likely just as dead.
-- Grants held from their notices (one round trip from a release to the next holder): each
-- attempt with a ticket writes its round and the node's time into the waiter's entry
-- ("ttl-ms claim-ms base round at-ms"). A short grant then sets the waiter's hand-off value of
-- that round, `<base>:h<round>`, which no attempt of that round or an earlier one claims (so
-- no late attempt, and no late rollback of one, takes it away), and its notice carries the
-- round and the node's time between that attempt and the grant: `:<round>:<ms since>`. A
-- waiter whose last attempt has that round and who hears such notices from a quorum holds at
-- once: each grant was made at least `ms since` (less the drift) after the attempt was sent,
-- and lasts its ms from then (docs/DESIGN.md, "Fair lock").
--
-- grant(channel, by, sure): hands the free key to the first waiter. A waiter in `sure` (the
--   releasing client's own waiters, which it hands the lock to itself, each with the round of
--   its last attempt) gets it for its whole TTL, with its hand-off value `<base>:h<round>`. Any other gets a short grant: the key, set to its
--   hand-off value of the round its entry records (`<base>:g` for an entry without one), for
--   its claim window (capped by its TTL and by what is left of its queue lease), and its place in line for exactly as long, so that a
--   waiter that does not claim in time (dead, frozen, cut off) loses both at once and the key
--   passes on. A claim is an attempt of the waiter's, which finds one of its values on the
--   key and sets its own attempt's value for its TTL. Announces grant:<waiter>:<by> (whole TTL) or
--   grant:<waiter>:<by>:<ms>:<next waiter>[:<round>:<ms since its attempt>] (short: the next
--   waiter's client tries when the window ends, and takes the key over if the grant lapsed),
--   `by` being the digest of the
--   holder value whose release (or withdrawal, or refused attempt) freed the key. Returns the
--   waiter and the grant's TTL in ms.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function leave(w)
  redis.call('zrem', KEYS[2], w)
  redis.call('zrem', KEYS[3], w)
  redis.call('hdel', KEYS[4], w)
end
for _, w in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) do
  leave(w)
end
local function keep_line()
  local last = redis.call('zrange', KEYS[3], -1, -1, 'WITHSCORES')
  if last[2] then
    for i = 2, 5 do
      redis.call('pexpireat', KEYS[i], last[2])
    end
  else
    redis.call('del', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  end
end
local function live(w)
  return redis.call('hget', KEYS[4], w) and redis.call('zscore', KEYS[3], w)
end
local function base_of(holder)
  return string.match(holder, '^(.*):[^:]*$') or holder
end
local function mine(value, base)
  return value and string.sub(value, 1, #base + 1) == base .. ':'
end
local function owns(w, base)
  local entry = redis.call('hget', KEYS[4], w)
  return entry
    and (string.match(entry, '^%d+ %d+ (%S+)') or string.match(entry, '^%d+ (%S+)$')) == base
end
local function first_live()
  while true do
    local first = redis.call('zrange', KEYS[2], 0, 0)[1]
    if not first then
      return nil, nil
    end
    local entry = redis.call('hget', KEYS[4], first)
    if entry and redis.call('zscore', KEYS[3], first) then
      return first, entry
    end
    leave(first)
  end
end
local function client_of(w)
  return string.match(w, '^([^.]*)%.') or w
end
local function next_live(after)
  local client = client_of(after)
  for _, w in ipairs(redis.call('zrange', KEYS[2], 1, 16)) do
    if client_of(w) ~= client and live(w) then
      return w
    end
  end
  return ''
end
local function grant(channel, by, sure)
  if redis.call('exists', KEYS[1]) == 1 then
    return nil, nil
  end
  local first, entry = first_live()
  if not first then
    return nil, nil
  end
  local ttl, claim, base, round, at = string.match(entry, '^(%d+) (%d+) (%S+) (%d+) (%d+)$')
  if not ttl then
    ttl, claim, base = string.match(entry, '^(%d+) (%d+) (.+)$')
  end
  if not ttl then
    -- an entry written before claim windows existed: "ttl-ms holder-value"
    ttl, base = string.match(entry, '^(%d+) (.+)$')
    claim = ttl
  end
  ttl = tonumber(ttl)
  local holder = base .. ':g'
  if sure[first] then
    redis.call('set', KEYS[1], base .. ':h' .. sure[first], 'PX', ttl)
    redis.call('publish', channel, 'grant:' .. first .. ':' .. by)
    return first, ttl
  end
  local left = tonumber(redis.call('zscore', KEYS[3], first)) - now
  local ms = math.max(1, math.min(ttl, tonumber(claim), left))
  local noticed = ''
  if round then
    -- The waiter's hand-off value of the round of its attempt that wrote the entry: only its
    -- later attempts claim it, and the notice tells the waiter how long after that attempt
    -- ran here the grant was made (see "Grants held from their notices" above).
    holder = base .. ':h' .. round
    noticed = ':' .. round .. ':' .. math.max(0, now - tonumber(at))
  end
  redis.call('set', KEYS[1], holder, 'PX', ms)
  redis.call('zadd', KEYS[3], 'XX', now + ms, first)
  redis.call('publish', channel,
    'grant:' .. first .. ':' .. by .. ':' .. ms .. ':' .. next_live(first) .. noticed)
  return first, ms
end
