-- A multi-key lock's release (and rollback): deletes the keys this holder holds and announces
-- each freed key on its own release channel, as release.lua does for one key, so that a
-- waiter on any one key of the set wakes.
--
-- KEYS the lock keys. ARGV[1] holder value, ARGV[2] the notice mode, ARGV[2 + i] the release
-- channel of KEYS[i].
-- Reply: 1 when every key was this holder's (all deleted), else 0.
local all = true
local digest = redis.sha1hex(ARGV[1])
for i, k in ipairs(KEYS) do
  local held = redis.call('get', k) == ARGV[1]
  if held then
    redis.call('del', k)
  else
    all = false
  end
  notify_release(held, ARGV[2], ARGV[i + 2], digest, function()
    return redis.call('exists', k) == 0
  end)
end
return flag(all)
