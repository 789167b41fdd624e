"""The Lua scripts of the Redis backend (see ``_redis.py`` for the key layout).

Every script runs atomically on the server. Index keys are built from the store's base (ARGV[1])
rather than declared, so they sit in the record's slot (undeclared same-slot keys are allowed
for scripts without a shebang).
"""

from __future__ import annotations

__all__ = ["DROP", "KEEP", "LEGACY", "PAGE", "READ", "WRITE"]

# Shared by WRITE and DROP: remove the index members of the summary stored now, where ``cur``
# starts with HMGET rev own sn so agent phase.
_UNINDEX = """
local base = ARGV[1]
local function forget(ix, n)
  redis.call("ZREM", ix, n)
  if redis.call("EXISTS", ix) == 0 then redis.call("SREM", base .. "ix", ix) end
end
local function unindex(cur, key)
  local n = cur[3] .. ":" .. key
  redis.call("ZREM", base .. "new", n)
  redis.call("ZREM", base .. "old", cur[4] .. ":" .. key)
  if cur[2] then forget(base .. "o:" .. cur[2], n) end
  if cur[5] then forget(base .. "a:" .. cur[5], n) end
  if cur[6] then
    redis.call("ZREM", base .. "f", n)
    forget(base .. "p:" .. cur[6], n)
  end
end
"""

# One write of a whole record, by plan_save's rules in its order (create_only, then the expected
# revision, then the owner): rewrites the summary fields and ``body``, moves every index entry,
# and with a ttl gives the hash a fresh expiry. It deletes the record's segment list, which only
# a record written by a version that stored histories in segments has (the DEL of the old hash
# drops that record's head fields too).
# A body of STAGE_BYTES or more is not an argument (Lua copies every argument it is given: 2.7 ms
# for 1.3 MB, against 1.4 ms for the bare SET); the caller SETs it under the staging key KEYS[3]
# in the same round trip, and the script RENAMEs that to the body key ``b:<revision>:<key>``,
# where a read GETs it (a key named by revision: a reader that finds it gone knows the record
# was replaced since it read the hash). A smaller body goes in the hash's ``body`` field.
# KEYS: record hash, segment list, staging key (or none). ARGV: 1 base, 2 key,
# 3 create_only ("1"), 4 expected revision ("" none), 5 body ("" when staged), 6 newest position,
# 7 oldest position, 8 owner, 9 agent, 10 phase, 11 run id, 12 saved at, 13 message count,
# 14 failure iteration (8-10 and 14: "" for none, else "=" and the value), 15 ttl ms (0 none),
# 16 size (of the record's bytes as a reader gets them).
WRITE = (
    _UNINDEX
    + """
local rec, key, staged = KEYS[1], ARGV[2], KEYS[3]
local function refuse(reply)
  if staged then redis.call("DEL", staged) end
  return reply
end
local cur = redis.call("HMGET", rec, "rev", "own", "sn", "so", "agent", "phase")
local rev = cur[1]
if rev and ARGV[3] == "1" then return refuse({"exists", rev}) end
if ARGV[4] ~= "" and rev ~= ARGV[4] then return refuse({"revision", rev}) end
local function opt(s) if s == "" then return false end return string.sub(s, 2) end
local owner, agent, phase, iter = opt(ARGV[8]), opt(ARGV[9]), opt(ARGV[10]), opt(ARGV[14])
if cur[2] and owner and owner ~= cur[2] then return refuse({"owner", cur[2]}) end
owner = cur[2] or owner
if rev then
  unindex(cur, key)
  redis.call("DEL", rec, base .. "b:" .. rev .. ":" .. key)
end
redis.call("DEL", KEYS[2])
-- A live record's revision goes up by one; a new key (or one deleted or expired) takes the
-- store's counter, which every write moves on and which so stays at or above every revision
-- issued: a key never repeats a revision it had.
local seq = redis.call("INCR", base .. "rev")
local newrev = seq
if rev then
  newrev = tonumber(rev) + 1
  if newrev > seq then redis.call("SET", base .. "rev", newrev) end  -- a store from before
end
local sn, so = ARGV[6], ARGV[7]
local f = {"sn", sn, "so", so, "run", ARGV[11], "at", ARGV[12], "msgs", ARGV[13],
  "rev", string.format("%d", newrev), "size", ARGV[16]}
local ttl = tonumber(ARGV[15])
if staged then
  local big = base .. "b:" .. string.format("%d", newrev) .. ":" .. key
  redis.call("RENAME", staged, big)
  if ttl > 0 then redis.call("PEXPIRE", big, ttl) else redis.call("PERSIST", big) end
else
  table.insert(f, "body"); table.insert(f, ARGV[5])
end
if owner then table.insert(f, "own"); table.insert(f, owner) end
if agent then table.insert(f, "agent"); table.insert(f, agent) end
if phase then table.insert(f, "phase"); table.insert(f, phase) end
if iter then table.insert(f, "iter"); table.insert(f, iter) end
redis.call("HSET", rec, unpack(f))
if ttl > 0 then redis.call("PEXPIRE", rec, ttl) end
-- With a ttl, an index expires with the last record written into it (each write moves its
-- expiry on, never back); an index already kept for ever (records without a ttl in it) stays
-- so, and a write without a ttl makes one kept for ever again.
local function refresh(ix, before)
  if ttl > 0 then
    if before == -2 or (before >= 0 and before < ttl) then redis.call("PEXPIRE", ix, ttl) end
  elseif before >= 0 then
    redis.call("PERSIST", ix)
  end
end
local function zput(ix, member)
  local before = redis.call("PTTL", ix)
  redis.call("ZADD", ix, 0, member)
  refresh(ix, before)
end
local n = sn .. ":" .. key
zput(base .. "new", n)
zput(base .. "old", so .. ":" .. key)
local function add(ix)
  zput(ix, n)
  local before = redis.call("PTTL", base .. "ix")
  redis.call("SADD", base .. "ix", ix)
  refresh(base .. "ix", before)
end
if owner then add(base .. "o:" .. owner) end
if agent then add(base .. "a:" .. agent) end
if phase then zput(base .. "f", n); add(base .. "p:" .. phase) end
return {"ok", newrev, owner}
"""
)

# KEYS: record hash, segment list (a record from before: see WRITE). ARGV: base, key, expected
# revision ("" none).
DROP = (
    _UNINDEX
    + """
local cur = redis.call("HMGET", KEYS[1], "rev", "own", "sn", "so", "agent", "phase")
if not cur[1] then return {"missing"} end
if ARGV[3] ~= "" and cur[1] ~= ARGV[3] then return {"revision", cur[1]} end
unindex(cur, ARGV[2])
redis.call("DEL", KEYS[1], KEYS[2], ARGV[1] .. "b:" .. cur[1] .. ":" .. ARGV[2])
return {"dropped"}
"""
)

# One batch of an index, checked against the records in the same atomic step: a member whose
# record is gone (expired) or no longer matches that index is removed, never returned.
# ARGV: base, min, max, count, position field (sn|so), column to check (0: none), wanted value
# ("" only that the column is set, "=v" that it equals v), key prefix ("" any). Returns the
# last member read, the count removed, the count of keys without the prefix (not read), rows.
PAGE = """
local base = ARGV[1]
local col, want, pre = tonumber(ARGV[6]), ARGV[7], ARGV[8]
local members = redis.call("ZRANGEBYLEX", KEYS[1], ARGV[2], ARGV[3], "LIMIT", 0, ARGV[4])
local out = {members[#members] or false, 0, 0}
local function read(m, sep, key)
  local row = redis.call("HMGET", base .. "r:" .. key, ARGV[5], "run", "at", "own", "agent",
    "phase", "iter", "msgs", "size", "rev")
  local live = row[1] == string.sub(m, 1, sep - 1)
  if live and col > 0 then
    if want == "" then live = row[col] ~= false else live = row[col] == string.sub(want, 2) end
  end
  if live then
    row[1] = key
    table.insert(out, row)
  else
    redis.call("ZREM", KEYS[1], m)
    out[2] = out[2] + 1
  end
end
for _, m in ipairs(members) do
  local sep = string.find(m, ":", 1, true)
  local key = string.sub(m, sep + 1)
  -- compared as bytes: no character of the prefix is a pattern
  if pre == "" or string.sub(key, 1, #pre) == pre then read(m, sep, key) else out[3] = out[3] + 1 end
end
if want ~= "" and redis.call("EXISTS", KEYS[1]) == 0 then
  redis.call("SREM", base .. "ix", KEYS[1])
end
return out
"""

# A fresh expiry for records that stay (the pieces a layout record keeps referring to): each
# hash, and its body where it is stored apart. KEYS: the record hashes. ARGV: base, ttl ms,
# then each record's key.
KEEP = """
local base, ttl = ARGV[1], ARGV[2]
for i, rec in ipairs(KEYS) do
  local rev = redis.call("HGET", rec, "rev")
  if rev then
    redis.call("PEXPIRE", rec, ttl)
    redis.call("PEXPIRE", base .. "b:" .. rev .. ":" .. ARGV[i + 2], ttl)
  end
end
return {"kept"}
"""

# Records read in one atomic step, each with its body where it is stored apart: what a reader
# falls back to when writers kept replacing a body between its hash read and its body read
# (Lua copies a body it returns: ~2 ms for 1.3 MB, so it is not the first way to read).
# KEYS: the record hashes. ARGV: base, then each record's key, then the fields (LOADED: the
# body first, the 0.4 head second, the revision last).
READ = """
local base, n = ARGV[1], #KEYS
local fields = {}
for i = n + 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {}
for i, rec in ipairs(KEYS) do
  local row = redis.call("HMGET", rec, unpack(fields))
  local rev = row[#row]
  if not row[1] and not row[2] and rev then
    row[1] = redis.call("GET", base .. "b:" .. rev .. ":" .. ARGV[i + 1])
  end
  out[i] = row
end
return out
"""

# A record version 0.4 stored in segments, in one atomic step: its hash's fields and its segment
# list (a MULTI pipeline would do, but redis-py's cluster client refuses one before 6.2).
# KEYS: the record hash, its segment list. ARGV: the fields (LOADED).
LEGACY = """
return {redis.call("HMGET", KEYS[1], unpack(ARGV)), redis.call("LRANGE", KEYS[2], 0, -1)}
"""
