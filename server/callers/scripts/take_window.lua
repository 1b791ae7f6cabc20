-- KEYS: the caller's window of one budget (submits, writes or queries: a sorted set, one member
-- per counted request, scored by Redis time, ms).
-- ARGV: limit, window_ms, member (unique per request).
-- Counts the request unless `limit` were counted in the last `window_ms`. Returns 0 when
-- counted, else the milliseconds until enough of them leave the window for one more.
local now = now_ms()
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local counted = redis.call('ZCARD', KEYS[1])
if counted >= limit then
  -- The request that must leave the window before one more fits (the oldest, unless the limit
  -- was lowered below what was already counted).
  local leaving = redis.call('ZRANGE', KEYS[1], counted - limit, counted - limit, 'WITHSCORES')
  return math.max(1, tonumber(leaving[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return 0
