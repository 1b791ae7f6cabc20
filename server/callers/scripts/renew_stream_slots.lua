-- KEYS: one set of open SSE connections (see take_stream_slot.lua).
-- ARGV: ttl_ms, then the ids of the connections in it that the calling server still holds.
-- Moves their lapse to now + ttl_ms; one that lapsed meanwhile (its server could not reach
-- Redis for a while) is counted again, since its connection is still open.
local lapse = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], lapse, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return #ARGV - 1
