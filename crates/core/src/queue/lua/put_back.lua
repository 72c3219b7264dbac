if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  if ARGV[2] == 'R' then
    redis.call('RPUSH', KEYS[2], ARGV[1])
  else
    redis.call('LPUSH', KEYS[2], ARGV[1])
  end
  return 1
end
return 0
