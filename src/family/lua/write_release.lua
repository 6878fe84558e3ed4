-- A write lock's release (and rollback): compare-and-delete of the writer's entry, as
-- release.lua. A release (mode "1") also deletes the pending mark if it is this request's
-- (ARGV[4]); a rollback leaves it, since the request still waits (it withdraws the mark with
-- write_withdraw.lua when it gives up). Notices as release.lua.
--
-- KEYS as read_acquire.lua. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
-- mode, ARGV[4] the request's id (may be empty).
-- Reply: 1 when the entry was deleted, else 0.
local held = redis.call('get', KEYS[1]) == ARGV[1]
if held then
  redis.call('del', KEYS[1])
end
if ARGV[3] == '1' and ARGV[4] ~= '' and redis.call('get', KEYS[3]) == ARGV[4] then
  redis.call('del', KEYS[3])
end
notify_release(held, ARGV[3], ARGV[2], redis.sha1hex(ARGV[1]), function()
  return redis.call('exists', KEYS[1]) == 0
end)
return flag(held)
