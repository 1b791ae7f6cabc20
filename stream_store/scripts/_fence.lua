-- Shared by the scripts of stream_store/log.py and server/access/quotas.py: composed in front of a script
-- that uses it (preamble + script, one chunk), never pasted into one. Only local functions: a
-- script may not create globals.

-- Redis's clock in milliseconds: every lease is measured on it, never on a client's clock.
local function now_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- The fence every append passes; returns an error reply when the write is refused, else nil.
-- Nothing is ever appended after the terminal event (`ended`), whoever tries: a run has one.
-- Refused when another attempt owns the run, or, with `check_lease`, when the writer's lease
-- has run out: a worker that was paused past its lease cannot write even before anyone has
-- taken the run over.
local function append_fence(record_key, attempt, check_lease)
  local rec = redis.call('HMGET', record_key, 'attempt', 'lease_until', 'ended')
  if not rec[1] then return redis.error_reply('GONE run record missing') end
  if rec[3] then return redis.error_reply('FENCED the stream has its terminal event') end
  if rec[1] ~= attempt then return redis.error_reply('FENCED attempt ' .. rec[1]) end
  if check_lease and rec[2] and tonumber(rec[2]) < now_ms() then
    return redis.error_reply('FENCED lease expired')
  end
  return nil
end
