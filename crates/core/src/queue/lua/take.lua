local out = {}
for i = 1, tonumber(ARGV[1]) do
  local job = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not job then break end
  out[i] = job
end
return out
