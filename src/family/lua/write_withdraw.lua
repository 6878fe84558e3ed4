-- A waiting writer's withdrawal of its pending mark, when its request gives up: deletes the
-- mark only if it is this request's, and then announces the key (readers the mark kept out
-- may come in now).
--
-- KEYS as read_acquire.lua. ARGV[1] the request's id, ARGV[2] release channel.
-- Reply: 1 when it deleted the mark, else 0.
if redis.call('get', KEYS[3]) == ARGV[1] then
  redis.call('del', KEYS[3])
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
  return 1
end
return 0
