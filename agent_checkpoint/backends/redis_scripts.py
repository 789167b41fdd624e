"""The Lua scripts of the Redis backend (see ``redis.py`` for the key layout).

Every script runs atomically on the server. Index keys are built from the store's base (ARGV[1])
rather than declared, so they sit in the record's slot (undeclared same-slot keys are allowed
for scripts without a shebang).
"""

from __future__ import annotations

__all__ = ["DROP", "PAGE", "WRITE"]

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

# One write of a record, in one of three modes:
# - "save": plan_save's rules, in its order (create_only, then the expected revision, then the
#   owner); stores ``body`` whole and deletes any segments;
# - "split": the same rules; stores a head, one segment and the segments' digest;
# - "append": applies only when the record is split, at the base revision and with the base
#   digest (otherwise "stale", nothing changed); then the owner rule; replaces the head, pushes
#   one segment, stores the new digest. A record that already holds the maximum segments first
#   has them merged into one, here in the same atomic step, joined exactly as
#   ``segments.assemble`` joins them (non-empty segments, separated by ","), so the assembled
#   bytes never change; a list that does not hold ``segs`` segments (one was lost) is not merged
#   (that would hide the loss): "stale", and the writer rewrites the record whole.
# Every mode rewrites the summary fields and moves every index entry, and with a ttl refreshes
# the expiry of every key of the record. A "split" write whose ARGV[22] is "staged" takes its
# segment from the staging list KEYS[3] (written by a plain RPUSH just before), renamed into
# place, and deletes the staging list when it refuses.
# KEYS: record hash, segment list[, staging list]. ARGV: 1 base, 2 key, 3 mode, 4 create_only
# ("1"), 5 expected
# or base revision ("" none), 6 body or head, 7 newest position, 8 oldest position, 9 owner,
# 10 agent, 11 phase, 12 run id, 13 saved at, 14 message count, 15 failure iteration (9-11 and
# 15: "" for none, else "=" and the value), 16 ttl ms (0 none), 17 segment, 18 digest,
# 19 assembled size, 20 base digest, 21 max segments, 22 "staged" or absent.
WRITE = (
    _UNINDEX
    + """
local rec, segs, key, mode = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
local staged = ARGV[22] == "staged"
local function refuse(reply)
  if staged then redis.call("DEL", KEYS[3]) end
  return reply
end
local cur = redis.call("HMGET", rec, "rev", "own", "sn", "so", "agent", "phase", "dig", "segs")
local rev = cur[1]
local merged
if mode == "append" then
  if not rev or rev ~= ARGV[5] or not cur[7] or cur[7] ~= ARGV[20] or not cur[8] then
    return {"stale"}
  end
  if tonumber(cur[8]) >= tonumber(ARGV[21]) then
    local parts, kept = redis.call("LRANGE", segs, 0, -1), {}
    if #parts ~= tonumber(cur[8]) then return {"stale"} end
    for _, s in ipairs(parts) do if s ~= "" then kept[#kept + 1] = s end end
    merged = table.concat(kept, ",")
  end
else
  if rev and ARGV[4] == "1" then return refuse({"exists", rev}) end
  if ARGV[5] ~= "" and rev ~= ARGV[5] then return refuse({"revision", rev}) end
end
local function opt(s) if s == "" then return false end return string.sub(s, 2) end
local owner, agent, phase, iter = opt(ARGV[9]), opt(ARGV[10]), opt(ARGV[11]), opt(ARGV[15])
if cur[2] and owner and owner ~= cur[2] then return refuse({"owner", cur[2]}) end
owner = cur[2] or owner
if rev then
  unindex(cur, key)
  redis.call("DEL", rec)
end
-- A live record's revision goes up by one; a new key (or one deleted or expired) takes the
-- store's counter, which every write moves on and which so stays at or above every revision
-- issued: a key never repeats a revision it had.
local seq = redis.call("INCR", base .. "rev")
local newrev = seq
if rev then
  newrev = tonumber(rev) + 1
  if newrev > seq then redis.call("SET", base .. "rev", newrev) end  -- a store from before
end
local sn, so = ARGV[7], ARGV[8]
local f = {"sn", sn, "so", so, "run", ARGV[12], "at", ARGV[13], "msgs", ARGV[14],
  "rev", string.format("%d", newrev)}
if mode == "save" then
  redis.call("DEL", segs)
  table.insert(f, "body"); table.insert(f, ARGV[6])
  table.insert(f, "size"); table.insert(f, string.len(ARGV[6]))
else
  local count = 1
  if merged then
    redis.call("DEL", segs)
    redis.call("RPUSH", segs, merged, ARGV[17])
    count = 2
  elseif mode == "append" then
    redis.call("RPUSH", segs, ARGV[17])
    count = tonumber(cur[8]) + 1
  elseif staged then
    redis.call("RENAME", KEYS[3], segs)  -- replaces any older list; the element is not copied
  else
    redis.call("DEL", segs)
    redis.call("RPUSH", segs, ARGV[17])
  end
  table.insert(f, "head"); table.insert(f, ARGV[6])
  table.insert(f, "dig"); table.insert(f, ARGV[18])
  table.insert(f, "segs"); table.insert(f, string.format("%d", count))
  table.insert(f, "size"); table.insert(f, ARGV[19])
end
if owner then table.insert(f, "own"); table.insert(f, owner) end
if agent then table.insert(f, "agent"); table.insert(f, agent) end
if phase then table.insert(f, "phase"); table.insert(f, phase) end
if iter then table.insert(f, "iter"); table.insert(f, iter) end
redis.call("HSET", rec, unpack(f))
local ttl = tonumber(ARGV[16])
if ttl > 0 then
  redis.call("PEXPIRE", rec, ttl)
  if mode ~= "save" then redis.call("PEXPIRE", segs, ttl) end
elseif mode ~= "save" then
  redis.call("PERSIST", segs)  -- no expiry: not the staging list's, nor one kept from before
end
local n = sn .. ":" .. key
redis.call("ZADD", base .. "new", 0, n)
redis.call("ZADD", base .. "old", 0, so .. ":" .. key)
local function add(ix) redis.call("ZADD", ix, 0, n); redis.call("SADD", base .. "ix", ix) end
if owner then add(base .. "o:" .. owner) end
if agent then add(base .. "a:" .. agent) end
if phase then redis.call("ZADD", base .. "f", 0, n); add(base .. "p:" .. phase) end
return {"ok", newrev, owner}
"""
)

# KEYS: record hash, segment list. ARGV: base, key, expected revision ("" none).
DROP = (
    _UNINDEX
    + """
local cur = redis.call("HMGET", KEYS[1], "rev", "own", "sn", "so", "agent", "phase")
if not cur[1] then return {"missing"} end
if ARGV[3] ~= "" and cur[1] ~= ARGV[3] then return {"revision", cur[1]} end
unindex(cur, ARGV[2])
redis.call("DEL", KEYS[1], KEYS[2])
return {"dropped"}
"""
)

# One batch of an index, checked against the records in the same atomic step: a member whose
# record is gone (expired) or no longer matches that index is removed, never returned.
# ARGV: base, min, max, count, position field (sn|so), column to check (0: none), wanted value
# ("" only that the column is set, "=v" that it equals v).
PAGE = """
local base = ARGV[1]
local col, want = tonumber(ARGV[6]), ARGV[7]
local members = redis.call("ZRANGEBYLEX", KEYS[1], ARGV[2], ARGV[3], "LIMIT", 0, ARGV[4])
local out = {members[#members] or false, 0}
for _, m in ipairs(members) do
  local sep = string.find(m, ":", 1, true)
  local key = string.sub(m, sep + 1)
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
if want ~= "" and redis.call("EXISTS", KEYS[1]) == 0 then
  redis.call("SREM", base .. "ix", KEYS[1])
end
return out
"""
