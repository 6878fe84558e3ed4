-- A multi-key lock's fencing write-back: fence_max.lua for every counter of the set.
--
-- KEYS the fencing counters. ARGV[1] the token.
-- Reply: 1.
local t = tonumber(ARGV[1])
for _, k in ipairs(KEYS) do
  local current = redis.call('get', k)
  if tonumber(current or '0') < t then
    current = ARGV[1]
  end
  -- Written also where it is higher: see fence_max.lua.
  redis.call('set', k, current)
end
return 1
