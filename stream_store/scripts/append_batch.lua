-- KEYS: record, events. ARGV: attempt, then event and data for each event. The same fence as
-- append.lua (`append_fence`, lease always checked), for a batch of events that change nothing
-- but the stream (tokens, messages): one round trip for all the events a run produced while
-- the previous batch was in flight.
local refused = append_fence(KEYS[1], ARGV[1], true)
if refused then return refused end
local id
for i = 2, #ARGV, 2 do
  id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[i], 'd', ARGV[i + 1], 'a', ARGV[1])
end
redis.call('HSET', KEYS[1], 'last_event_id', id)
return id
