package main

// The executor's replies as Redis gives them. A storage server runs a command in a Lua script (its marker and
// the command in one step), so the reply it returns is RESP2 as a script sees it: a map comes as a flat array,
// a set as an array, a double as a bulk string, and a missing array ("*-1") as a missing string ("$-1"). For
// the commands whose reply Redis shapes so, reshape puts the shape back, and the writer then gives a client
// what Redis would give it in its protocol (RESP2 or RESP3); the differential test holds it to a redis-server.

import (
	"strings"

	"distcache/internal/resp"
)

func hasWord(args [][]byte, word string) bool {
	for _, a := range args[2:] {
		if strings.EqualFold(string(a), word) {
			return true
		}
	}
	return false
}

func asDouble(v resp.Value) resp.Value {
	if v.Kind == resp.Bulk {
		return resp.Value{Kind: resp.Double, Str: v.Str}
	}
	return v
}

// pairs is a flat array [a1, b1, a2, b2...] as RESP3's array of pairs [[a1, b1], ...], b a double if scores.
func pairs(v resp.Value, scores bool) resp.Value {
	if v.Kind != resp.Array || len(v.Elems)%2 != 0 {
		return v
	}
	out := resp.Value{Kind: resp.Array, Elems: make([]resp.Value, 0, len(v.Elems)/2)}
	for i := 0; i < len(v.Elems); i += 2 {
		b := v.Elems[i+1]
		if scores {
			b = asDouble(b)
		}
		out.Elems = append(out.Elems, resp.Value{Kind: resp.Array, Elems: []resp.Value{v.Elems[i], b}})
	}
	return out
}

// shaped is a reply for either protocol, or (differ) one for RESP2 clients and another for RESP3 clients.
type shaped struct {
	v      resp.Value
	resp3  resp.Value // what a RESP3 client gets, when it differs from v
	differ bool
}

// reshape is the executor's reply v to args as Redis shapes it: for RESP2 clients, and for RESP3 clients.
func reshape(args [][]byte, v resp.Value) shaped {
	name := strings.ToLower(string(args[0]))
	same := func(x resp.Value) shaped { return shaped{v: x} }
	three := func(x resp.Value) shaped { return shaped{v: v, resp3: x, differ: true} }
	if v.Kind == resp.Err {
		return same(v)
	}
	switch name {
	case "lpop", "rpop":
		if len(args) == 3 && v.Kind == resp.Null { // with a count, a missing key is a missing array
			v.NullArray = true
		}
		return same(v)
	case "hgetall":
		if v.Kind == resp.Array {
			return same(resp.Value{Kind: resp.Map, Elems: v.Elems}) // the writer flattens it for RESP2
		}
	case "smembers":
		if v.Kind == resp.Array {
			return same(resp.Value{Kind: resp.Set, Elems: v.Elems})
		}
	case "spop":
		if len(args) == 3 && v.Kind == resp.Array {
			return same(resp.Value{Kind: resp.Set, Elems: v.Elems})
		}
	case "zscore", "zincrby":
		return same(asDouble(v))
	case "zadd":
		if hasWord(args, "incr") {
			return same(asDouble(v))
		}
	case "zmscore":
		if v.Kind == resp.Array {
			for i := range v.Elems {
				v.Elems[i] = asDouble(v.Elems[i])
			}
		}
		return same(v)
	case "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zrandmember":
		if hasWord(args, "withscores") {
			return three(pairs(v, true))
		}
	case "zpopmin", "zpopmax":
		if len(args) == 3 {
			return three(pairs(v, true))
		}
		if v.Kind == resp.Array && len(v.Elems) == 2 {
			return three(resp.Value{Kind: resp.Array, Elems: []resp.Value{v.Elems[0], asDouble(v.Elems[1])}})
		}
	case "hrandfield":
		if hasWord(args, "withvalues") {
			return three(pairs(v, false))
		}
	}
	return same(v)
}
