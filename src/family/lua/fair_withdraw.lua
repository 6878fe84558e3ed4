-- A fair waiter's withdrawal, when its request gives up (or, cut off from a quorum, goes on
-- under a new identity): leaves the line, deletes the key if it holds one of the request's
-- values (a grant, or an attempt's left behind: nobody will claim it), and then hands the key
-- on as fair_release.lua does (short grants only), or announces it free.
--
-- KEYS as fair_line.lua. ARGV[1] the waiter id, ARGV[2] the request's base, ARGV[3]
-- release channel.
-- Reply: 1 when the key had been granted to the request, else 0.
leave(ARGV[1])
local held = mine(redis.call('get', KEYS[1]), ARGV[2])
if held then
  redis.call('del', KEYS[1])
end
local granted = grant(ARGV[3], redis.sha1hex(ARGV[2]), {})
keep_line()
if held and not granted then
  redis.call('publish', ARGV[3], redis.sha1hex(ARGV[2]))
end
if held then
  return 1
end
return 0
