-- A multi-key lock's fencing write-back: fence_max.lua for every counter of the set.
--
-- KEYS the fencing counters. ARGV[1] the token.
-- Reply: 1.
local t = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  if tonumber(redis.call('get', k) or '0') < t then
    redis.call('set', k, ARGV[1])
  end
end
return 1
