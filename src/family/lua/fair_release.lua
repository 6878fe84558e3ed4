-- A fair lock's release (and the rollback of a failed attempt): compare-and-delete of the
-- key; then the free key goes straight to the first live waiter (grant in fair_line.lua):
-- the hand-off. A release (mode "1") deletes any of the request's values (its guard's, or a
-- grant made to it meanwhile) and takes the request out of the line, only where it held the
-- key or the line's entry has its base (a release by a made-up token naming a waiter, whose
-- id is public, takes nobody out). A rollback (mode "2") deletes only its attempt's own
-- value, leaves the request in line and, where it deleted the key, grants it to the first
-- waiter, which may be the request itself: the key goes straight back to it, rather than lie
-- free with nobody allowed to take it but a request that sleeps. Where a release grants
-- nobody, the notice is release.lua's; a rollback announces nothing but its grants (its
-- notices would wake the waiters once per attempt of one wait).
--
-- KEYS as fair_line.lua. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
-- mode, ARGV[4] the request's waiter id, ARGV[5...] the waiters the releasing client hands
-- the lock to itself (whole-TTL grants), each followed by the round of its last attempt.
-- Reply: 1 when the key was deleted, else 0; as {1 or 0, waiter id, grant ms} when the key
-- went to that waiter.
local base = base_of(ARGV[1])
local current = redis.call('get', KEYS[1])
local held = current == ARGV[1] or (ARGV[3] == '1' and mine(current, base))
if held then
  redis.call('del', KEYS[1])
end
if ARGV[3] == '1' and (held or owns(ARGV[4], base)) then
  leave(ARGV[4])
end
local sure = {}
for i = 5, #ARGV - 1, 2 do
  sure[ARGV[i]] = ARGV[i + 1]
end
local granted, ms = nil, nil
if held or ARGV[3] == '1' then
  granted, ms = grant(ARGV[2], redis.sha1hex(ARGV[1]), sure)
end
keep_line()
local answer = 0
if held then
  answer = 1
end
if granted then
  return {answer, granted, ms}
end
if ARGV[3] == '1' and (held or redis.call('exists', KEYS[1]) == 0) then
  redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
end
return answer
