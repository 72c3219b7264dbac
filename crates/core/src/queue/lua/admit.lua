local want = tonumber(ARGV[1])
local n = want
local wait = 0
local interval = tonumber(ARGV[2])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if interval > 0 then
  local tolerance = interval * tonumber(ARGV[3])
  local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tat < now_us then tat = now_us end
  local room = math.floor((now_us + tolerance - tat) / interval)
  n = math.max(0, math.min(room, n))
  if n > 0 then
    tat = tat + n * interval
    redis.call('SET', KEYS[2], string.format('%d', tat), 'PX', math.ceil((tat - now_us) / 1000) + 1)
  end
  if n < want then wait = math.max(1, tat + interval - tolerance - now_us) end
end
local out = {0, wait, 0}
local limit = tonumber(ARGV[4])
if limit > 0 and n > 0 then
  local now = math.floor(now_us / 1000)
  local life = tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local free = limit - redis.call('ZCARD', KEYS[1])
  local k = math.max(0, math.min(free, n))
  if k < n then out[3] = 1 end
  n = k
  for i = 1, n do
    local lease = ARGV[5] .. ':' .. i
    redis.call('ZADD', KEYS[1], now + life, lease)
    out[3 + i] = lease
  end
  if n > 0 then
    -- The set lives as long as its longest lease (another worker's may
    -- live longer than ours, if its webhook's timeout differs).
    local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[1], top[2])
  end
end
out[1] = n
return out
