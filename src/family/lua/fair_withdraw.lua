-- A fair waiter's withdrawal, when its request gives up: leaves the line, deletes the key if
-- a release had granted it to this request (nobody will claim it), and then hands the key on
-- as fair_release.lua does (short grants only), or announces it free.
--
-- KEYS as fair_line.lua. ARGV[1] the waiter id, ARGV[2] the request's holder value, ARGV[3]
-- release channel.
-- Reply: 1 when the key had been granted to the request, else 0.
leave(ARGV[1])
local held = redis.call('get', KEYS[1]) == ARGV[2]
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
