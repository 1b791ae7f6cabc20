-- KEYS: the queue, then for each job its arq in-progress key, job key and try counter. ARGV:
-- in-progress timeout (ms), the worker's clock (ms, as arq compares scores with it), the try
-- counter's TTL (s), then the job ids (in KEYS' order).
-- arq's claim of a job (`Worker.start_jobs`: WATCH, EXISTS, ZSCORE, MULTI/PSETEX/EXEC) and its
-- read of the claimed job (`Worker.run_job`: GET the job, INCR and EXPIRE its try counter),
-- for every job of one read of the queue in one round trip, each claim atomic: a job starts
-- only if no worker has it in progress and it is due. Returns, per job, false when it is not
-- to be started here, else {score, the serialized job (false if its key is gone), its try}.
local started = {}
for i = 1, #ARGV - 3 do
  local job_id = ARGV[i + 3]
  local in_progress, job_key, try_key = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local claim = false
  if redis.call('EXISTS', in_progress) == 0 then
    local score = redis.call('ZSCORE', KEYS[1], job_id)
    if score and tonumber(score) <= tonumber(ARGV[2]) then
      redis.call('PSETEX', in_progress, ARGV[1], '1')
      local try = redis.call('INCR', try_key)
      redis.call('EXPIRE', try_key, ARGV[3])
      claim = {score, redis.call('GET', job_key), try}
    end
  end
  started[i] = claim
end
return started
