-- Shared by the release scripts: a release's notice, and the 1 / 0 answer.
--
-- notify_release(held, mode, channel, digest, free): publishes `digest` (the SHA1 of the
-- holder value, never the value: it may still be live on nodes the release has not reached)
-- on `channel` where this call freed the key (`held`), and, for a release (mode "1"), also
-- wherever the key is free now (`free()`, asked only then): a quorum returns before every
-- node answers, and waiters may be subscribed only where this holder's entry never was. A
-- rollback (mode "2") announces only what it gave back: fewer than a quorum of nodes, which
-- wakes nobody (waiters count the notices of one release and wake at a quorum).
-- Returns how many subscribers heard the notice (0 when none was published).
local function notify_release(held, mode, channel, digest, free)
  if held or (mode == '1' and free()) then
    return redis.call('publish', channel, digest)
  end
  return 0
end
-- flag(b): 1 or 0.
local function flag(b)
  if b then
    return 1
  end
  return 0
end
