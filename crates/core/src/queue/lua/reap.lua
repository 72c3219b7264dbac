local requeued, dead = 0, {}
for i = 4, #ARGV do
  local job = ARGV[i]
  local rkey = KEYS[i - 1]
  if redis.call('LPOS', KEYS[1], job) then
    redis.call('RPUSH', rkey, ARGV[2])
    redis.call('EXPIRE', rkey, ARGV[3])
    if redis.call('LLEN', rkey) > tonumber(ARGV[1]) then
      dead[#dead + 1] = job
      dead[#dead + 1] = cjson.encode(redis.call('LRANGE', rkey, 0, -1))
    else
      redis.call('LREM', KEYS[1], -1, job)
      redis.call('RPUSH', KEYS[2], job)
      requeued = requeued + 1
    end
  end
end
return {requeued, dead}
