-- The mutex's release, and the rollback of a failed attempt: compare-and-delete, acting only
-- where the stored holder value matches; then the notice (notice.lua).
--
-- KEYS[1] the lock key. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
-- mode: "1" a release, "2" a rollback.
-- Reply: 1 when the key was this holder's and is deleted, else 0.
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
notify_release(held, ARGV[3], ARGV[2], redis.sha1hex(ARGV[1]), function()
  return redis.call('exists', KEYS[1]) == 0
end)
return flag(held)
