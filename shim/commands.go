package main

// The commands a shim runs for EXEC, from its Redis' own command table (docs/protocol.md, "Any single-key
// command"; the Python shim's shim/commands.py has the rules at length). At start the shim reads COMMAND:
// each command's arity, flags and key positions. An EXEC runs only if Redis knows the command, with the arity
// Redis wants, whose every key is the request's key where Redis says; with movable keys only if COMMAND
// GETKEYS finds the request's key and no other. Scripts and what reaches past the key's database or the
// connection are refused, as are commands naming no key. A write command goes through the two-phase protocol
// as a PUT does, in one Lua script with its marker and a read of what it left of the key (RUN).

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

var refusedCommands = map[string]bool{}

func init() {
	for _, c := range strings.Fields("eval evalsha eval_ro evalsha_ro fcall fcall_ro function script multi exec " +
		"discard watch unwatch select move swapdb copy migrate subscribe psubscribe ssubscribe unsubscribe " +
		"punsubscribe sunsubscribe wait waitaof monitor sync psync client hello auth reset quit") {
		refusedCommands[c] = true
	}
}

type command struct {
	name              string
	arity             int // > 0: exactly; < 0: at least -arity (the name counts)
	write, movable    bool
	first, last, step int
}

type commandTable map[string]*command

// loadCommands reads Redis' COMMAND (subcommands as "name|sub").
func loadCommands(ctx context.Context, c rueidis.Client) (commandTable, error) {
	rows, err := c.Do(ctx, c.B().Command().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("COMMAND: %v", err)
	}
	table := commandTable{}
	var add func(row rueidis.RedisMessage)
	add = func(row rueidis.RedisMessage) {
		f, err := row.ToArray()
		if err != nil || len(f) < 6 {
			return
		}
		name, _ := f[0].ToString()
		arity, _ := f[1].AsInt64()
		flags, _ := f[2].AsStrSlice()
		first, _ := f[3].AsInt64()
		last, _ := f[4].AsInt64()
		step, _ := f[5].AsInt64()
		cmd := &command{name: strings.ToLower(name), arity: int(arity), first: int(first), last: int(last),
			step: int(step)}
		for _, fl := range flags {
			cmd.write = cmd.write || fl == "write"
			cmd.movable = cmd.movable || fl == "movablekeys"
		}
		table[cmd.name] = cmd
		if len(f) > 9 {
			subs, _ := f[9].ToArray()
			for _, sub := range subs {
				add(sub)
			}
		}
	}
	for _, row := range rows {
		add(row)
	}
	return table, nil
}

// refusal is an EXEC the shim does not run; its message says why (what the client's error shows).
type refusal struct{ why string }

func (r refusal) Error() string { return r.why }

// check finds the command args (its name first) if the shim runs it for key; a refusal saying why not.
func (t commandTable) check(ctx context.Context, c rueidis.Client, args [][]byte, key []byte) (*command, error) {
	if len(args) == 0 {
		return nil, refusal{"an EXEC carries a command: its name, then its arguments"}
	}
	for _, b := range args[0] {
		if b >= 0x80 {
			return nil, refusal{"unknown command (its name is not ASCII)"}
		}
	}
	name := strings.ToLower(string(args[0]))
	cmd := t[name]
	if cmd == nil {
		return nil, refusal{fmt.Sprintf("unknown command '%s'", name)}
	}
	if len(args) > 1 {
		if sub := t[name+"|"+strings.ToLower(latin1(args[1]))]; sub != nil {
			cmd = sub
		}
	}
	if refusedCommands[name] {
		return nil, refusal{fmt.Sprintf("'%s' reaches past one key (or is a script): not run through DistCache", name)}
	}
	argc := len(args)
	if (cmd.arity > 0 && argc != cmd.arity) || (cmd.arity < 0 && argc < -cmd.arity) {
		return nil, refusal{fmt.Sprintf("wrong number of arguments for '%s'", cmd.name)}
	}
	var keys [][]byte
	switch {
	case cmd.movable:
		strs := make([]string, 0, len(args))
		for _, a := range args {
			strs = append(strs, string(a))
		}
		got, err := c.Do(ctx, c.B().Arbitrary("COMMAND", "GETKEYS").Args(strs...).Build()).AsStrSlice()
		if err != nil {
			if re, ok := rueidis.IsRedisErr(err); ok {
				return nil, refusal{re.Error()}
			}
			return nil, err
		}
		for _, k := range got {
			keys = append(keys, []byte(k))
		}
	case cmd.first > 0:
		last := cmd.last
		if last < 0 {
			last = argc + last
		}
		for i := cmd.first; i <= last && i < argc; i += max(cmd.step, 1) {
			keys = append(keys, args[i])
		}
	}
	if len(keys) == 0 {
		return nil, refusal{fmt.Sprintf("'%s' names no key: only single-key commands run through DistCache", name)}
	}
	for _, k := range keys {
		if string(k) != string(key) {
			return nil, refusal{fmt.Sprintf("'%s' names other keys than the request's (a command runs on the "+
				"shim of its one key)", name)}
		}
	}
	return cmd, nil
}

// latin1 reads bytes as Latin-1 (each byte one character), as the Python shim decodes a subcommand's name.
func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// runScript runs one command (ARGV[4..]) on the user database with its marker, and reads what it left of the
// key: {reply as RESP, the key's type, its value if a string, its PTTL}. KEYS[1]: the key; KEYS[2]: the marker
// (optional); ARGV[1]: the marker's life in ms, ARGV[2]: the marker database, ARGV[3]: the user database.
var runScript = newScript(strings.ReplaceAll(`
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
  redis.call('SET', KEYS[2], '@REPLY@' .. reply, 'PX', ARGV[1])
  redis.call('SELECT', ARGV[3])
end
return {reply, kind, value, ttl}
`, "@REPLY@", markerReply))

// wrongTypeReply is Redis' words for a GET of a key holding another type.
const wrongTypeReply = "WRONGTYPE Operation against a key holding the wrong kind of value"

// refusalReply is an EXEC's refusal as the value of its BAD_REQUEST reply: a RESP error, one line (a line break
// in what it names of the client's command becomes a space, as Redis words its own errors).
func refusalReply(why string) []byte {
	return []byte("-ERR " + strings.NewReplacer("\r", " ", "\n", " ").Replace(why) + "\r\n")
}
