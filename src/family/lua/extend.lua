-- Extend (a mutex's, a writer's, a fair lock's entry): PEXPIRE only where the holder's value is
-- stored. Never creates the key, so an expired lock cannot be turned back into a held one.
--
-- KEYS[1] the lock key. ARGV[1] holder value, ARGV[2] the new TTL in ms.
-- Reply: 1 when extended, 0 when the holder does not hold the key here.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
