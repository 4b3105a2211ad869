package main

// The command table: what Redis says of each of its commands (arity, flags, key specs), read from the replies
// to COMMAND a redis-server gave at build time (tools/rediscommands: Debian's redis-server, the storage
// servers'). It drives dispatch as Redis' own table does: the arity check and its words, which arguments are
// keys (so a command goes to its key's storage server), whether it writes (so a pipeline keeps its order per
// key), and the gateway's answers to COMMAND, COMMAND COUNT/INFO/DOCS/LIST.

import (
	"embed"
	"fmt"
	"strings"

	"distcache/internal/resp"
)

//go:embed redisdata/*.resp2 redisdata/*.resp3
var redisData embed.FS

// keySpec is one of a command's key specs (Redis' "begin_search" then "find_keys").
type keySpec struct {
	index             int    // begin_search index (0: by keyword)
	keyword           string // begin_search keyword
	startFrom         int
	rangeMode         bool // find_keys range (else keynum)
	lastKey, keyStep  int
	limit             int
	keyNumIdx, first  int
	write, incomplete bool
}

// command is one entry of the table.
type command struct {
	name     string // full name in lower case: "get", "client|setinfo"
	arity    int    // Redis' convention: n exactly, -n at least n
	flags    map[string]bool
	specs    []keySpec
	subs     map[string]*command
	raw      [2][]byte // its COMMAND INFO entry in RESP2 and RESP3
	docsRaw  [2][]byte // its COMMAND DOCS pair (name and doc) in RESP2 and RESP3
	category map[string]bool
}

type commandTable struct {
	byName map[string]*command
	order  []string
	all    [2][]byte // the whole COMMAND reply per protocol
}

func (t *commandTable) lookup(name string) *command { return t.byName[strings.ToLower(name)] }

func loadTable() (*commandTable, error) {
	t := &commandTable{byName: map[string]*command{}}
	for i, proto := range []string{"resp2", "resp3"} {
		data, err := redisData.ReadFile("redisdata/command." + proto)
		if err != nil {
			return nil, err
		}
		t.all[i] = data
		v, _, err := resp.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("the built-in COMMAND reply: %v", err)
		}
		// every element's bytes, to answer COMMAND INFO with Redis' own entries
		entries := elements(data)
		for j, e := range v.Elems {
			c, err := parseCommand(e, entries[j], i, t, nil)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				t.order = append(t.order, c.name)
			}
		}
		docs, err := redisData.ReadFile("redisdata/docs." + proto)
		if err != nil {
			return nil, err
		}
		dv, _, err := resp.Parse(docs)
		if err != nil {
			return nil, fmt.Errorf("the built-in COMMAND DOCS reply: %v", err)
		}
		pairs := elements(docs)
		for j := 0; j+1 < len(dv.Elems); j += 2 {
			if c := t.byName[strings.ToLower(string(dv.Elems[j].Str))]; c != nil {
				c.docsRaw[i] = append(append([]byte{}, pairs[j]...), pairs[j+1]...)
			}
		}
	}
	if t.byName["get"] == nil {
		return nil, fmt.Errorf("the built-in command table has no GET")
	}
	return t, nil
}

// elements are the encoded bytes of each element of the aggregate data holds (a map's keys and values in turn).
func elements(data []byte) [][]byte {
	at := 0
	for at < len(data) && data[at] != '\n' {
		at++
	}
	at++ // past the aggregate's header line
	var out [][]byte
	for at < len(data) {
		_, n, err := resp.Parse(data[at:])
		if err != nil {
			break
		}
		out = append(out, data[at:at+n])
		at += n
	}
	return out
}

// field is the value after name in a flat list of name-value pairs (a map in RESP3, an array in RESP2).
func field(v resp.Value, name string) (resp.Value, bool) {
	for i := 0; i+1 < len(v.Elems); i += 2 {
		if strings.EqualFold(string(v.Elems[i].Str), name) {
			return v.Elems[i+1], true
		}
	}
	return resp.Value{}, false
}

func intField(v resp.Value, name string) int {
	f, _ := field(v, name)
	return int(f.Int)
}

func parseCommand(e resp.Value, raw []byte, proto int, t *commandTable, parent *command) (*command, error) {
	if len(e.Elems) < 10 {
		return nil, fmt.Errorf("a COMMAND entry of %d fields", len(e.Elems))
	}
	name := strings.ToLower(string(e.Elems[0].Str))
	var c *command
	if parent != nil {
		c = parent.subs[name]
	} else {
		c = t.byName[name]
	}
	if c == nil {
		c = &command{name: name, arity: int(e.Elems[1].Int), flags: map[string]bool{}, subs: map[string]*command{},
			category: map[string]bool{}}
		for _, f := range e.Elems[2].Elems {
			c.flags[strings.ToLower(string(f.Str))] = true
		}
		for _, f := range e.Elems[6].Elems {
			c.category[strings.ToLower(string(f.Str))] = true
		}
		for _, ks := range e.Elems[8].Elems {
			c.specs = append(c.specs, parseSpec(ks))
		}
		if parent != nil {
			parent.subs[name] = c
		} else {
			t.byName[name] = c
		}
	}
	c.raw[proto] = raw
	parts := elements(raw)
	if len(parts) < 10 {
		return nil, fmt.Errorf("COMMAND entry %s: %d fields", name, len(parts))
	}
	subs := elements(parts[9])
	for j, sub := range e.Elems[9].Elems {
		if _, err := parseCommand(sub, subs[j], proto, t, c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func parseSpec(v resp.Value) keySpec {
	var s keySpec
	if flags, ok := field(v, "flags"); ok {
		for _, f := range flags.Elems {
			switch string(f.Str) {
			case "OW", "RW", "update", "insert", "delete":
				s.write = true
			case "incomplete", "variable_flags":
				s.incomplete = true
			}
		}
	}
	bs, _ := field(v, "begin_search")
	bsType, _ := field(bs, "type")
	bsSpec, _ := field(bs, "spec")
	switch string(bsType.Str) {
	case "index":
		s.index = intField(bsSpec, "index")
	case "keyword":
		kw, _ := field(bsSpec, "keyword")
		s.keyword, s.startFrom = string(kw.Str), intField(bsSpec, "startfrom")
	default:
		s.incomplete = true
	}
	fk, _ := field(v, "find_keys")
	fkType, _ := field(fk, "type")
	fkSpec, _ := field(fk, "spec")
	switch string(fkType.Str) {
	case "range":
		s.rangeMode = true
		s.lastKey, s.keyStep, s.limit = intField(fkSpec, "lastkey"), intField(fkSpec, "keystep"), intField(fkSpec, "limit")
	case "keynum":
		s.keyNumIdx, s.first, s.keyStep = intField(fkSpec, "keynumidx"), intField(fkSpec, "firstkey"), intField(fkSpec, "keystep")
	default:
		s.incomplete = true
	}
	return s
}

// resolve is the command args name, a container's subcommand looked up; nil for an unknown one.
func (t *commandTable) resolve(args [][]byte) *command {
	c := t.lookup(string(args[0]))
	if c == nil || len(c.subs) == 0 || len(args) < 2 {
		return c
	}
	if sub := c.subs[c.name+"|"+strings.ToLower(string(args[1]))]; sub != nil {
		return sub
	}
	return c
}

// arityOK is Redis' arity rule.
func (c *command) arityOK(n int) bool {
	return (c.arity > 0 && n == c.arity) || (c.arity < 0 && n >= -c.arity)
}

// keys are the positions of args that are keys (Redis' getKeysUsingKeySpecs), and whether each is written.
func (c *command) keys(args [][]byte) (pos []int, writes []bool) {
	n := len(args)
	for _, s := range c.specs {
		if s.incomplete && s.index == 0 && s.keyword == "" {
			continue
		}
		first := s.index
		if s.keyword != "" {
			first = 0
			start, step, end := s.startFrom, 1, n
			if start < 0 {
				start, step, end = n+start, -1, 0
			}
			for i := start; i > 0 && i < end || (step < 0 && i > end); i += step {
				if strings.EqualFold(string(args[i]), s.keyword) {
					first = i + 1
					break
				}
			}
			if first == 0 {
				continue
			}
		}
		if first <= 0 || first >= n {
			continue
		}
		var last, step int
		if s.rangeMode {
			step = max(1, s.keyStep)
			switch {
			case s.lastKey >= 0:
				last = first + s.lastKey
			case s.limit <= 1:
				last = n + s.lastKey
			default:
				last = first + (n-1-first)/s.limit
			}
		} else {
			if first+s.keyNumIdx >= n {
				continue
			}
			count := 0
			for _, ch := range args[first+s.keyNumIdx] {
				if ch < '0' || ch > '9' {
					count = -1
					break
				}
				count = count*10 + int(ch-'0')
			}
			if count <= 0 {
				continue
			}
			step = max(1, s.keyStep)
			first += s.first
			last = first + (count-1)*step
		}
		for i := first; i <= last && i < n; i += step {
			pos = append(pos, i)
			writes = append(writes, s.write)
		}
	}
	return pos, writes
}
