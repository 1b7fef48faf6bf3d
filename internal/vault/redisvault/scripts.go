package redisvault

import "github.com/redis/go-redis/v9"

// Lua scripts run atomically on the tenant's slot (or the {global} slot), so
// a check and the write it guards cannot interleave with another store of the
// fleet. Scores are unix milliseconds; ZADD ... GT keeps a last-seen time
// from moving back when clocks of the fleet differ slightly.

// touchScript confirms a tenant's artifacts and bumps stale last-seen times.
// KEYS: seen, then one content key per digest. ARGV: now, touchAfter, then
// one hex digest per content key. Returns 1 (present) or 0 per digest.
var touchScript = redis.NewScript(`
local now, after = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local h = ARGV[i]
  local seen = redis.call('ZSCORE', KEYS[1], h)
  if not seen then
    out[#out+1] = 0
  elseif redis.call('EXISTS', KEYS[i-1]) == 0 then
    return redis.error_reply('TTVAULT artifact ' .. string.sub(h, 1, 16) .. ' has metadata but no content')
  else
    if now - tonumber(seen) >= after then
      redis.call('ZADD', KEYS[1], 'XX', 'GT', now, h)
    end
    out[#out+1] = 1
  end
end
return out
`)

// evictOwn is shared by writeScript: it deletes the tenant's least recently
// seen artifacts with last-seen before cutoff, except those in keep (the
// request's own), until used <= target. The content keys are built from the
// prefix; they share the tag of KEYS[1].
const evictOwn = `
local function evict_own(seen, meta, cprefix, cutoff, used, target, keep)
  local freed, n, skip = 0, 0, 0
  while used > target do
    local old = redis.call('ZRANGE', seen, '-inf', '(' .. cutoff, 'BYSCORE', 'LIMIT', skip, 64)
    if #old == 0 then break end
    for _, h in ipairs(old) do
      if used <= target then break end
      if keep[h] then
        skip = skip + 1
      else
        local m = redis.call('HGET', meta, h)
        local sz = m and tonumber(string.match(m, '^(%d+)')) or 0
        redis.call('DEL', cprefix .. h)
        redis.call('ZREM', seen, h)
        redis.call('HDEL', meta, h)
        used, freed, n = used - sz, freed + sz, n + 1
      end
    end
  end
  return used, freed, n
end
`

// writeScript stores the artifacts not yet present within the tenant's
// quota. Over the quota it first evicts the tenant's own least recently seen
// artifacts outside retention (down to quota - need - slack).
// KEYS: seen, meta, tenant bytes, then one content key per artifact.
// ARGV: now, cutoff, tenant max, slack, content key prefix, then per
// artifact: hex digest, size, chars, content.
// Returns {bytes written or -1 when over quota, bytes evicted, artifacts
// evicted, then 1 (written) or 0 (already present) per artifact}.
var writeScript = redis.NewScript(evictOwn + `
local now, cutoff = tonumber(ARGV[1]), ARGV[2]
local tmax, slack, cprefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local n = (#ARGV - 5) / 4
local need, fresh, keep = 0, {}, {}
for i = 1, n do
  local b = 5 + 4 * (i - 1)
  keep[ARGV[b+1]] = true
  if redis.call('ZSCORE', KEYS[1], ARGV[b+1]) then
    fresh[i] = 0
  else
    fresh[i] = 1
    need = need + tonumber(ARGV[b+2])
  end
end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local freed, evicted = 0, 0
if need > tmax then return {-1, 0, 0} end
if used + need > tmax then
  used, freed, evicted = evict_own(KEYS[1], KEYS[2], cprefix, cutoff, used, tmax - need - slack, keep)
  redis.call('SET', KEYS[3], used)
  if used + need > tmax then return {-1, freed, evicted} end
end
for i = 1, n do
  if fresh[i] == 1 then
    local b = 5 + 4 * (i - 1)
    redis.call('SET', KEYS[3+i], ARGV[b+4])
    redis.call('HSET', KEYS[2], ARGV[b+1], ARGV[b+2] .. ' ' .. ARGV[b+3] .. ' ' .. now)
    redis.call('ZADD', KEYS[1], now, ARGV[b+1])
  end
end
if need > 0 then redis.call('INCRBY', KEYS[3], need) end
local out = {need, freed, evicted}
for i = 1, n do out[#out+1] = fresh[i] end
return out
`)

// evictScript deletes the given artifacts of one tenant if they are still
// outside retention (one may have been seen since the caller chose it).
// KEYS: seen, meta, tenant bytes. ARGV: cutoff, content key prefix, then hex
// digests. Returns {bytes freed, artifacts evicted}.
var evictScript = redis.NewScript(`
local cutoff, cprefix = tonumber(ARGV[1]), ARGV[2]
local freed, n = 0, 0
for i = 3, #ARGV do
  local h = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], h)
  if s and tonumber(s) < cutoff then
    local m = redis.call('HGET', KEYS[2], h)
    local sz = m and tonumber(string.match(m, '^(%d+)')) or 0
    redis.call('DEL', cprefix .. h)
    redis.call('ZREM', KEYS[1], h)
    redis.call('HDEL', KEYS[2], h)
    freed, n = freed + sz, n + 1
  end
end
if freed > 0 then redis.call('DECRBY', KEYS[3], freed) end
return {freed, n}
`)

// reserveScript claims bytes under the fleet's cap and registers the tenant
// tag for eviction scans. KEYS: global bytes, tenants. ARGV: n, max, tag.
// Returns {1 claimed or 0, bytes in use}.
var reserveScript = redis.NewScript(`
local n, max = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur + n > max then return {0, cur} end
redis.call('SADD', KEYS[2], ARGV[3])
return {1, redis.call('INCRBY', KEYS[1], n)}
`)

// recordScript writes a lineage node with its TTL and bumps the stale
// last-seen times of the artifacts it referenced.
// KEYS: lineage key, seen. ARGV: node, ttl ms, now, touchAfter, hex digests.
var recordScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local now, after = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, #ARGV do
  local s = redis.call('ZSCORE', KEYS[2], ARGV[i])
  if s and now - tonumber(s) >= after then
    redis.call('ZADD', KEYS[2], 'XX', 'GT', now, ARGV[i])
  end
end
return 1
`)

// recountScript sets the fleet's byte counter to a recount, unless it
// changed since it was read. KEYS: global bytes. ARGV: observed, recount.
var recountScript = redis.NewScript(`
if tonumber(redis.call('GET', KEYS[1]) or '0') == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
`)
