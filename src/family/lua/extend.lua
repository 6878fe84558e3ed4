-- Extend (a mutex's, a writer's, a fair lock's entry): PEXPIRE only where the holder's value is
-- stored. Never creates the key, so an expired lock cannot be turned back into a held one. With
-- a second key, the holder record (publish.lua) of a holder that published one expires with
-- the entry (only then: a lock without a record touches no other key, as an ACL rule written
-- for the lock keys allows).
--
-- KEYS[1] the lock key, KEYS[2] (optional) its holder record. ARGV[1] holder value, ARGV[2]
-- the new TTL in ms.
-- Reply: 1 when extended, 0 when the holder does not hold the key here.
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if #KEYS > 1 then
    redis.call('pexpire', KEYS[2], ARGV[2])
  end
  return 1
end
return 0
