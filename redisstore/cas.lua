-- Compare-and-swap of one key's state (the record of any policy: a
-- bucket, a window, a log...), the only script of redisstore.
--
-- KEYS[1]  the key (one key, so the script runs on any cluster
--          node that owns its slot; it touches no other key).
-- ARGV[1]  "1" when the key must hold ARGV[2], "0" when it must not exist
--          (an empty string is a state, so absence needs its own flag).
-- ARGV[2]  the expected state; ignored when ARGV[1] is "0".
-- ARGV[3]  the next state.
-- ARGV[4]  how long to keep it, in whole milliseconds as a decimal
--          integer; "0" keeps it without expiry.
--
-- Returns the integer 1 when it wrote ARGV[3]. When it did not write, it
-- returns what the key holds, so that the client needs no GET before its
-- next attempt: the integer 0 when the key does not exist, else the key's
-- string (a string reply, never an integer, so the three cannot be
-- confused).
--
-- Limits: states are binary-safe strings of up to Redis's 512 MB; the
-- comparison is byte for byte. The TTL is passed to SET … PX as the string
-- the client sent and never becomes a Lua number (a double, exact only up
-- to 2^53), so any millisecond count of a time.Duration (at most about
-- 9.2e12, 292 years) works; Redis itself refuses an expiry whose absolute
-- time in milliseconds would overflow a signed 64-bit integer. Expiry is
-- measured by the server's clock. A key of another type than string makes
-- GET fail with WRONGTYPE before anything is written.
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then
    return cur
  end
elseif cur ~= ARGV[2] then
  -- cur is false when the key does not exist, which equals no string.
  return cur or 0
end
if ARGV[4] == '0' then
  redis.call('SET', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
return 1
