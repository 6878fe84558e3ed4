-- A request to release (`QuorumLock::request_release`): each holder of the key here is told
-- `ask <digest> <key>` on the holder notices' channel; nothing on the key changes (the holder
-- may honour it, or not).
--
-- KEYS[1] the lock key (an entry, or a semaphore's permits), KEYS[2] its readers. ARGV[1] the
-- holder notices' channel.
-- Reply: how many holders were asked here.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local asked = 0
local function ask(holder)
  -- A break's tombstone (a value with a space) is no holder.
  if not string.find(holder, ' ', 1, true) then
    redis.call('publish', ARGV[1], 'ask ' .. redis.sha1hex(holder) .. ' ' .. KEYS[1])
    asked = asked + 1
  end
end
local function ask_members(set)
  for _, member in ipairs(redis.call('zrangebyscore', set, '(' .. now, '+inf')) do
    ask(member)
  end
end
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
  ask(redis.call('get', KEYS[1]))
elseif kind == 'zset' then
  ask_members(KEYS[1])
end
ask_members(KEYS[2])
return asked
