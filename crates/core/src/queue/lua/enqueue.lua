local ttl = ARGV[1]
local token = ARGV[2]
local queue = KEYS[#KEYS]
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  if redis.call('EXISTS', KEYS[2 * i]) == 0
     and redis.call('SET', KEYS[2 * i - 1], token, 'NX', 'EX', ttl) then
    redis.call('LPUSH', queue, ARGV[i + 2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
