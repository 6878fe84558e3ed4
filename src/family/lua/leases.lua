-- Shared by the scripts on a sorted set of leases (a semaphore's permits, a read-write lock's
-- readers), the set being `leases` (set by the script before this fragment): the node's own
-- time in ms (TIME, so scripts are replicated by effects: explicit on Redis 6.2, always so
-- from 7), the expired members purged first (a member whose expiry is at or before now is
-- gone), and expire_at_latest(), which keeps the set's own expiry at its latest member's, so
-- that nothing lingers.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', leases, '-inf', now)
local function expire_at_latest()
  local last = redis.call('zrange', leases, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('pexpireat', leases, last[2])
  end
end
