-- KEYS: the queue, then arq's in-progress key of each job. ARGV: in-progress timeout (ms), the
-- worker's clock (ms, as arq compares scores with it), then the job ids (in KEYS' order).
-- arq's claim of a job (`Worker.start_jobs`: WATCH, EXISTS, ZSCORE, MULTI/PSETEX/EXEC), for
-- every job of one read of the queue in one round trip, each as atomic: a job starts only if
-- no worker has it in progress and it is due. Returns, per job, its score, or false when it is
-- not to be started here.
local started = {}
for i = 2, #KEYS do
  local job_id = ARGV[i + 1]
  local score = false
  if redis.call('EXISTS', KEYS[i]) == 0 then
    score = redis.call('ZSCORE', KEYS[1], job_id)
    if not score or tonumber(score) > tonumber(ARGV[2]) then
      score = false
    else
      redis.call('PSETEX', KEYS[i], ARGV[1], '1')
    end
  end
  started[i - 1] = score
end
return started
