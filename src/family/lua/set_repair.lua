-- A multi-key lock's repair, right after a quorum confirmed a renewal: puts back the missing
-- keys (SET NX PX remaining-validity) only if no key of the set is another holder's, and
-- raises this holder's other keys to the same TTL (never lowering one), so that the node
-- supports the whole set until the deadline again.
--
-- KEYS the lock keys. ARGV[1] holder value, ARGV[2] the remaining validity in ms.
-- Reply: 1 when it put back at least one key, else 0.
for _, k in ipairs(KEYS) do
  local v = redis.call('get', k)
  if v and v ~= ARGV[1] then
    return 0
  end
end
local ms = tonumber(ARGV[2])
local put = 0
for _, k in ipairs(KEYS) do
  if redis.call('set', k, ARGV[1], 'NX', 'PX', ms) then
    put = 1
  elseif redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end
return put
