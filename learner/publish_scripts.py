"""The Lua scripts of ``learner/publish.py`` (its docstring describes the keys and the order of
a publication's steps)."""

# ARGV: prefix, version, blob or manifest, keep_versions, number of chunks (0: the blob itself),
# the index it shares ('' for none), that index's chunks (-1: it was stored before). Returns the
# current version after the call; an error if a chunk or the index is missing.
PUBLISH_SCRIPT = r"""
local P, version, keep, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ref, index_chunks = ARGV[6], tonumber(ARGV[7])
local CURRENT, VERSIONS, CHUNKS, INDEXES = P .. 'current', P .. 'versions', P .. 'chunks',
  P .. 'indexes'
local blob = P .. 'v' .. ARGV[2]
local function check(key, count)
  for i = 0, count - 1 do
    if redis.call('EXISTS', key .. ':' .. i) == 0 then
      return redis.error_reply('Q-table chunk ' .. i .. ' of ' .. key .. ' is missing')
    end
  end
end
local function keep_chunks(key, field, count)
  local before = tonumber(redis.call('HGET', CHUNKS, field) or '0')
  for i = count, before - 1 do
    redis.call('UNLINK', key .. ':' .. i)
  end
  for i = 0, count - 1 do
    redis.call('PERSIST', key .. ':' .. i)
  end
  if count > 0 then
    redis.call('HSET', CHUNKS, field, count)
  else
    redis.call('HDEL', CHUNKS, field)
  end
end
local function drop(key, field)
  local chunks = tonumber(redis.call('HGET', CHUNKS, field) or '0')
  for i = 0, chunks - 1 do
    redis.call('UNLINK', key .. ':' .. i)
  end
  redis.call('HDEL', CHUNKS, field)
  redis.call('UNLINK', key)
end
local missing = check(blob, n)
if missing then return missing end
if ref ~= '' then
  local index = P .. 'i' .. ref
  if redis.call('EXISTS', index) == 0 then
    return redis.error_reply('Q-table index ' .. ref .. ' is missing')
  end
  if index_chunks >= 0 then
    missing = check(index, index_chunks)
    if missing then return missing end
    redis.call('PERSIST', index)
    keep_chunks(index, 'i' .. ref, index_chunks)
  end
  redis.call('HSET', INDEXES, ARGV[2], ref)
else
  redis.call('HDEL', INDEXES, ARGV[2])
end
keep_chunks(blob, ARGV[2], n)
redis.call('SET', blob, ARGV[3])
redis.call('ZADD', VERSIONS, version, ARGV[2])
local current = tonumber(redis.call('GET', CURRENT) or '0')
if version > current then
  redis.call('SET', CURRENT, ARGV[2])
  current = version
end
local old = redis.call('ZRANGE', VERSIONS, 0, -(keep + 1))
local orphans = {}
for _, member in ipairs(old) do
  if tonumber(member) ~= current then
    drop(P .. 'v' .. member, member)
    local shared = redis.call('HGET', INDEXES, member)
    if shared then
      orphans[shared] = true
      redis.call('HDEL', INDEXES, member)
    end
    redis.call('ZREM', VERSIONS, member)
  end
end
for _, shared in ipairs(redis.call('HVALS', INDEXES)) do
  orphans[shared] = nil
end
for shared, _ in pairs(orphans) do
  drop(P .. 'i' .. shared, 'i' .. shared)
end
return current
"""

# ARGV: prefix. A counter that also never hands out a version at or below ``current`` (say,
# after tables were published with versions chosen elsewhere).
NEXT_VERSION_SCRIPT = r"""
local P = ARGV[1]
local n = redis.call('INCR', P .. 'next')
local current = tonumber(redis.call('GET', P .. 'current') or '0')
if n <= current then
  n = current + 1
  redis.call('SET', P .. 'next', n)
end
return n
"""
