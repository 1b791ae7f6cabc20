-- KEYS: record, events. ARGV: attempt, max_events, max_bytes, then event and data for each event.
-- The same fence as append.lua (`append_fence`, lease always checked), for a batch of events that
-- change nothing but the stream (tokens, messages): one round trip for all the events a run
-- produced while the previous batch was in flight.
-- Bounded: the stream may hold `max_events` events and `max_bytes` bytes of event names and data
-- (the record's `bytes`, counted by every script that appends). The events that fit are
-- appended; then `TOO_LARGE events|bytes <bound>` refuses the rest, and the run fails. append.lua
-- never refuses: its events (status, retry, outcome) are the run's own, a few per dispatch.
local refused = append_fence(KEYS[1], ARGV[1], true)
if refused then return refused end
local max_events, max_bytes = tonumber(ARGV[2]), tonumber(ARGV[3])
local count = redis.call('XLEN', KEYS[2])
local size = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
local id, full
for i = 4, #ARGV, 2 do
  local cost = #ARGV[i] + #ARGV[i + 1]
  if count >= max_events then full = 'events ' .. ARGV[2] break end
  if size + cost > max_bytes then full = 'bytes ' .. ARGV[3] break end
  id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[i], 'd', ARGV[i + 1], 'a', ARGV[1])
  count, size = count + 1, size + cost
end
if id then redis.call('HSET', KEYS[1], 'last_event_id', id, 'bytes', size) end
if full then return redis.error_reply('TOO_LARGE ' .. full) end
return id
