-- Breaking a lock (administration, `QuorumLock::break_lock`): whatever holds the key here
-- loses it, and nobody else can take it before the broken holders' entries would have
-- expired, nor before the lock delay asked for. Each entry is replaced by a tombstone with its
-- expiry (at least now + the delay): a value with a space, which no holder value has, so that
-- the holders' extends and releases find nothing of theirs (their next renewal finds the lock
-- lost) and a new acquire finds the key taken until then.
--
-- In two steps: first every broken holder is announced (reads and PUBLISH only), then the
-- entries are replaced. A PUBLISH refused (an ACL rule without the channel) aborts the script
-- before anything was written: a break that fails changes nothing (a script's writes are not
-- rolled back when it aborts, so no write may come before a call that can be refused).
--
-- KEYS[1] the lock key (an entry, or a semaphore's permits), KEYS[2] its readers, KEYS[3] its
-- holder record. ARGV[1] the tombstone value (it has a space), ARGV[2] the delay in ms;
-- ARGV[3] "delete" (only the fail point `BreakDeletes`: the defect, entries deleted and no
-- holder told, as an operator's `DEL` of the key would); ARGV[4]
-- the holder notices' channel, where each broken holder is told `break <digest> <key>`.
-- Reply: how many holders were broken here (a tombstone is none).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[2])
local broken = 0
local function holder(value)
  return not string.find(value, ' ', 1, true)
end
local function notify(value)
  if ARGV[3] ~= 'delete' then
    redis.call('publish', ARGV[4], 'break ' .. redis.sha1hex(value) .. ' ' .. KEYS[1])
  end
end
-- A sorted set's live members and their expiries, read only.
local function live(set)
  return redis.call('zrangebyscore', set, '(' .. now, '+inf', 'WITHSCORES')
end

-- Step 1: what is held, announced.
local kind = redis.call('type', KEYS[1])['ok']
local value
local sets = {}
if kind == 'string' then
  value = redis.call('get', KEYS[1])
  if holder(value) then
    broken = broken + 1
    notify(value)
  end
elseif kind == 'zset' then
  sets[#sets + 1] = {KEYS[1], live(KEYS[1])}
end
sets[#sets + 1] = {KEYS[2], live(KEYS[2])}
for _, s in ipairs(sets) do
  local members = s[2]
  for i = 1, #members, 2 do
    if holder(members[i]) then
      broken = broken + 1
      notify(members[i])
    end
  end
end

-- Step 2: the entries replaced.
if ARGV[3] == 'delete' then
  redis.call('del', KEYS[1], KEYS[2], KEYS[3])
  return broken
end
if value then
  -- -1: an entry without a TTL (not the library's): kept for the delay only.
  local ttl = math.max(redis.call('pttl', KEYS[1]), delay)
  if ttl > 0 then
    redis.call('set', KEYS[1], ARGV[1], 'PX', ttl)
  else
    redis.call('del', KEYS[1])
  end
end
for _, s in ipairs(sets) do
  local set, members = s[1], s[2]
  if #members > 0 then
    redis.call('del', set)
    local latest = now + delay
    for i = 1, #members, 2 do
      local expiry = math.max(tonumber(members[i + 1]), now + delay)
      redis.call('zadd', set, expiry, ARGV[1] .. ' ' .. i)
      latest = math.max(latest, expiry)
    end
    redis.call('pexpireat', set, latest)
  end
end
redis.call('del', KEYS[3])
return broken
