-- Breaking a lock (administration, `QuorumLock::break_lock`): whatever holds the key here
-- loses it, and nobody else can take it before the broken holders' entries would have
-- expired, nor before the lock delay asked for. Each entry is replaced by a tombstone with its
-- expiry (at least now + the delay): a value with a space, which no holder value has, so that
-- the holders' extends and releases find nothing of theirs (their next renewal finds the lock
-- lost) and a new acquire finds the key taken until then.
--
-- KEYS[1] the lock key (an entry, or a semaphore's permits), KEYS[2] its readers, KEYS[3] its
-- holder record. ARGV[1] the tombstone value (it has a space), ARGV[2] the delay in ms;
-- ARGV[3] "delete" (only the fail point `BreakDeletes`: the defect, entries deleted); ARGV[4]
-- the holder notices' channel, where each broken holder is told `break <digest> <key>`.
-- Reply: how many holders were broken here (a tombstone is none).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[2])
local broken = 0
local function notify(holder)
  redis.call('publish', ARGV[4], 'break ' .. redis.sha1hex(holder) .. ' ' .. KEYS[1])
end
-- A sorted set of leases: each live member replaced by a tombstone member with its expiry.
local function entomb(set)
  redis.call('zremrangebyscore', set, '-inf', now)
  local live = redis.call('zrange', set, 0, -1, 'WITHSCORES')
  if #live == 0 then
    return
  end
  redis.call('del', set)
  local latest = now + delay
  for i = 1, #live, 2 do
    local expiry = math.max(tonumber(live[i + 1]), now + delay)
    redis.call('zadd', set, expiry, ARGV[1] .. ' ' .. i)
    latest = math.max(latest, expiry)
    if not string.find(live[i], ' ', 1, true) then
      broken = broken + 1
      notify(live[i])
    end
  end
  redis.call('pexpireat', set, latest)
end
local kind = redis.call('type', KEYS[1])['ok']
if ARGV[3] == 'delete' then
  redis.call('del', KEYS[1], KEYS[2], KEYS[3])
  return 1
end
if kind == 'string' then
  local value = redis.call('get', KEYS[1])
  if not string.find(value, ' ', 1, true) then
    broken = broken + 1
    notify(value)
  end
  -- -1: an entry without a TTL (not the library's): kept for the delay only.
  local ttl = math.max(redis.call('pttl', KEYS[1]), delay)
  if ttl > 0 then
    redis.call('set', KEYS[1], ARGV[1], 'PX', ttl)
  else
    redis.call('del', KEYS[1])
  end
elseif kind == 'zset' then
  entomb(KEYS[1])
end
entomb(KEYS[2])
redis.call('del', KEYS[3])
return broken
