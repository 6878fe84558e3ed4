-- The mutex's release, and the rollback of a failed attempt: compare-and-delete, acting only
-- where the stored holder value matches; then the notice (notice.lua).
--
-- KEYS[1] the lock key. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
-- mode: "1" a release, "2" a rollback.
-- Reply: when the key was this holder's and is deleted, 1 plus the number of subscribers that
-- heard the notice (the releasing client's own waiters among them: see `arbiter`), else 0.
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
local heard = notify_release(held, ARGV[3], ARGV[2], redis.sha1hex(ARGV[1]), function()
  return redis.call('exists', KEYS[1]) == 0
end)
if held then
  return 1 + heard
end
return 0
