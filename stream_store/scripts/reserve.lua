-- KEYS: record. ARGV: attempt.
-- Whether append.lua would take a status event of `attempt` now, without writing it: for a
-- transition that must not commit in Postgres unless its event can be written, and whose event
-- its viewers must not see before that commit (lifecycle.py, `cancel` and `resume`). Refused as
-- the append would be: at `maxmemory` (a field set and removed at once, which Redis refuses as
-- it would the XADD), then by `append_fence` (lease checked). The probe comes first: a missing
-- record is GONE only when Redis has room to write the one that replaces it.
redis.call('HSET', KEYS[1], 'reserved', '1')
redis.call('HDEL', KEYS[1], 'reserved')
local refused = append_fence(KEYS[1], ARGV[1], true)
if refused then return refused end
return 1
