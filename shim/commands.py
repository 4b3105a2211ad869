"""The commands a shim runs for EXEC, from its Redis' own command table (docs/protocol.md, "Any single-key command").

At start the shim reads ``COMMAND`` from its Redis (not a hand-kept list): each command's arity, flags and key
positions.  An EXEC is run only if it is a command Redis knows, with the arity Redis wants, whose every key is the
request's key, at the place Redis says (a key specification that lies is refused); a command with movable keys
(``movablekeys``: SORT with BY/GET, MIGRATE, GEORADIUS STORE...) only if ``COMMAND GETKEYS`` finds the request's key
and no other.  Scripts and what reaches beyond the key's database or the connection (EVAL, FCALL, MULTI, SELECT,
MOVE, SWAPDB, WATCH, SUBSCRIBE, ...) are refused with a clear error, as are commands with no key at all.

A command flagged ``write`` goes through the two-phase protocol as a PUT does, and every command that sets or
clears a time to live is one (EXPIRE, SET EX, GETEX, PERSIST...: Redis flags them ``write``).  It runs in one Lua
script with its dedup marker and a read of the key's type, value and time to live, so phase 2 fills the caches with
what the command left, or leaves them invalid (a hash, a counter with a TTL...).  The script returns the command's
reply RESP-encoded, what the EXEC_REPLY carries and the marker keeps, so a retried command gets the same reply
(an INCR is applied once, and its retry answers the first reply's number).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distcache.wire import Status

if TYPE_CHECKING:
    from redis.asyncio import Redis

# what a script cannot run, or what would reach past the key (another database, the connection, other keys)
REFUSED = frozenset(
    {
        "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro", "function", "script",
        "multi", "exec", "discard", "watch", "unwatch", "select", "move", "swapdb", "copy", "migrate",
        "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
        "wait", "waitaof", "monitor", "sync", "psync", "client", "hello", "auth", "reset", "quit",
    }
)  # fmt: skip


class CommandRefusedError(ValueError):
    """An EXEC the shim does not run; the message says why (what the client's error shows)."""


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    arity: int  # > 0: exactly; < 0: at least -arity (the name counts)
    write: bool
    first: int  # the first key's argument index (the name is 0); 0: no key
    last: int  # the last key's (< 0: counted from the end)
    step: int
    movable: bool  # the key positions depend on the arguments (COMMAND GETKEYS finds them)

    def key_positions(self, argc: int) -> range:
        last = self.last if self.last >= 0 else argc + self.last
        return range(self.first, last + 1, max(self.step, 1))


class CommandTable:
    """Redis' commands, as its COMMAND answers (read once at start: :meth:`load`)."""

    def __init__(self, commands: dict[str, Command]) -> None:
        self.commands = commands

    @classmethod
    async def load(cls, redis: Redis) -> CommandTable:
        table = {}
        for name, info in (await redis.command()).items():
            rows = [
                (name, info["arity"], info["flags"], info["first_key_pos"], info["last_key_pos"], info["step_count"])
            ]
            rows += [tuple(sub[:6]) for sub in info.get("subcommands") or []]  # OBJECT ENCODING is object|encoding
            for n, arity, flags, first, last, step in rows:
                fl = {f.decode() if isinstance(f, bytes) else f for f in flags}
                n = (n.decode() if isinstance(n, bytes) else n).lower()
                table[n] = Command(n, int(arity), "write" in fl, int(first), int(last), int(step), "movablekeys" in fl)
        return cls(table)

    async def check(self, redis: Redis, args: list[bytes], key: bytes) -> Command:
        """The command ``args`` (its name first) if the shim runs it for ``key``; CommandRefusedError saying why not."""
        if not args:
            raise CommandRefusedError("an EXEC carries a command: its name, then its arguments")
        try:
            name = args[0].decode("ascii").lower()
        except UnicodeDecodeError:
            raise CommandRefusedError("unknown command (its name is not ASCII)") from None
        cmd = self.commands.get(name)
        if cmd is None:
            raise CommandRefusedError(f"unknown command '{name}'")
        if len(args) > 1 and f"{name}|{args[1].decode('latin-1').lower()}" in self.commands:  # a subcommand
            cmd = self.commands[f"{name}|{args[1].decode('latin-1').lower()}"]
        if name in REFUSED:
            raise CommandRefusedError(f"'{name}' reaches past one key (or is a script): not run through DistCache")
        argc = len(args)
        if (cmd.arity > 0 and argc != cmd.arity) or (cmd.arity < 0 and argc < -cmd.arity):
            raise CommandRefusedError(f"wrong number of arguments for '{cmd.name}'")
        if cmd.movable:
            keys = await redis.execute_command("COMMAND", "GETKEYS", *args)
        elif cmd.first > 0:
            keys = [args[i] for i in cmd.key_positions(argc) if i < argc]
        else:
            keys = []
        if not keys:
            raise CommandRefusedError(f"'{name}' names no key: only single-key commands run through DistCache")
        if any(bytes(k) != key for k in keys):
            raise CommandRefusedError(
                f"'{name}' names other keys than the request's (a command runs on the shim of its one key)"
            )
        return cmd


# Runs one command (ARGV[4..]) on the user database with its marker, and reads what it left of the key: returns
# {reply as RESP, the key's type, its value if a string, its PTTL}.  KEYS[1]: the key; KEYS[2]: the marker
# (optional); ARGV[1]: the marker's life in ms, ARGV[2]: the marker database, ARGV[3]: the user database.
RUN = r"""
local function resp(x)
  local t = type(x)
  if t == 'number' then return ':' .. string.format('%.0f', x) .. '\r\n' end
  if t == 'string' then return '$' .. #x .. '\r\n' .. x .. '\r\n' end
  if t == 'boolean' then if x then return ':1\r\n' end return '$-1\r\n' end
  if x.ok then return '+' .. x.ok .. '\r\n' end
  if x.err then return '-' .. x.err .. '\r\n' end
  local out = {'*' .. #x .. '\r\n'}
  for i = 1, #x do out[#out + 1] = resp(x[i]) end
  return table.concat(out)
end
local reply = resp(redis.pcall(unpack(ARGV, 4)))
local kind = redis.call('TYPE', KEYS[1]).ok
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if KEYS[2] then
  redis.call('SELECT', ARGV[2])
  redis.call('SET', KEYS[2], 'X' .. reply, 'PX', ARGV[1])
  redis.call('SELECT', ARGV[3])
end
return {reply, kind, value, ttl}
"""
MARKER_REPLY = b"X"  # an EXEC's marker: this byte, then the reply it had (RESP)
WRONGTYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"  # Redis' words, for a GET


def reply_status(resp: bytes) -> Status:
    """The status of an EXEC_REPLY carrying ``resp``: WRONG_TYPE for Redis' WRONGTYPE error, else OK (the reply,
    an error of the command's included, is in the value)."""
    return Status.WRONG_TYPE if resp.startswith(b"-WRONGTYPE") else Status.OK


def refusal_reply(why: str) -> bytes:
    """An EXEC's refusal as the value of its BAD_REQUEST reply: a RESP error, as Redis words its own."""
    return b"-ERR " + why.encode() + b"\r\n"
