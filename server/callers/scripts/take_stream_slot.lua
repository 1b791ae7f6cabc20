-- KEYS: one or two sets of open SSE connections (the caller's, then the stream token's), each a
-- sorted set of connection ids scored by when the connection lapses (Redis time, ms).
-- ARGV: connection id, ttl_ms, then the limit of each key, in order.
-- Takes a slot in every set, or in none when one is full. Lapsed connections (their server
-- stopped renewing them: it died or lost Redis) are pruned first, so they never hold a slot.
-- Returns 0 when taken, else the 1-based index of the first full set.
local now = now_ms()
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[i + 2]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end
return 0
