package main

// The strings family's fast paths and the multi-key commands fanned out over the storage servers. A GET is
// protocol v2's GET (a switch may answer it), a plain SET its PUT, DEL and UNLINK its DELETE per key; a SET
// with options and every other command of one key run in the key's storage server's executor. MGET, MSET,
// DEL, UNLINK, EXISTS and TOUCH send one request per key, all in flight at once, and merge the replies as
// twemproxy does: each key's part is atomic, the command as a whole is not (docs/gateway.md).

import (
	"strings"

	"distcache/internal/dc"
	"distcache/internal/fabric"
	"distcache/internal/resp"
)

func (g *Gateway) countHit(r fabric.Result) {
	if r.Err == nil {
		if r.Cached {
			g.stats.hits.Add(1)
		} else {
			g.stats.misses.Add(1)
		}
	}
}

func getCmd(c *client, _ *command, args [][]byte) reply {
	key := args[1]
	return c.order([][]byte{key}, []bool{false}, func() reply {
		call := c.g.fabric.Go(fabric.Request{Op: dc.OpGet, Key: key})
		return &later{calls: []*fabric.Call{call}, make: func(rs []fabric.Result, w *resp.Writer) {
			r := rs[0]
			c.g.countHit(r)
			switch {
			case r.Err != nil:
				c.fabricError(r.Err, w)
			case r.Status == dc.StatusNotFound:
				w.Nil()
			default:
				w.Bulk(r.Value)
			}
		}}
	})
}

func setCmd(c *client, cmd *command, args [][]byte) reply {
	if len(args) != 3 { // options (NX, XX, GET, EX...): Redis parses and runs them, in the executor
		return c.execute(cmd, args)
	}
	key, value := args[1], args[2]
	return c.order([][]byte{key}, []bool{true}, func() reply {
		call := c.g.fabric.Go(fabric.Request{Op: dc.OpPut, Key: key, Value: value})
		return &later{calls: []*fabric.Call{call}, make: func(rs []fabric.Result, w *resp.Writer) {
			if rs[0].Err != nil {
				c.fabricError(rs[0].Err, w)
				return
			}
			w.Status("OK")
		}}
	})
}

// fanOut sends one request per key (its own order kept per key) and merges their results with merge.
func (c *client) fanOut(keys [][]byte, write bool, req func(key []byte) fabric.Request,
	merge func(rs []fabric.Result, w *resp.Writer)) reply {
	multi := &later{make: merge}
	for _, key := range keys {
		c.order([][]byte{key}, []bool{write}, func() reply {
			call := c.g.fabric.Go(req(key))
			multi.calls = append(multi.calls, call)
			return &later{calls: []*fabric.Call{call}}
		})
	}
	return multi
}

// firstError writes the first failed key's error; false: none failed.
func (c *client) firstError(rs []fabric.Result, w *resp.Writer) bool {
	for _, r := range rs {
		if r.Err != nil {
			c.fabricError(r.Err, w)
			return true
		}
	}
	return false
}

func deleteCmd(c *client, _ *command, args [][]byte) reply {
	return c.fanOut(args[1:], true, func(key []byte) fabric.Request {
		return fabric.Request{Op: dc.OpDelete, Key: key}
	}, func(rs []fabric.Result, w *resp.Writer) {
		if c.firstError(rs, w) {
			return
		}
		n := 0
		for _, r := range rs {
			if r.Status == dc.StatusOk {
				n++
			}
		}
		w.Int(int64(n))
	})
}

// countCmd is EXISTS or TOUCH: the command on each key in its executor, the integers summed (a key named
// twice counts twice, as in Redis).
func countCmd(c *client, cmd *command, args [][]byte) reply {
	name := []byte(strings.ToUpper(cmd.name))
	return c.fanOut(args[1:], cmd.name == "touch", func(key []byte) fabric.Request {
		return fabric.Request{Op: dc.OpExec, Key: key, Args: [][]byte{name, key}}
	}, func(rs []fabric.Result, w *resp.Writer) {
		if c.firstError(rs, w) {
			return
		}
		var n int64
		for _, r := range rs {
			v, _, err := resp.Parse(r.Value)
			if err != nil || v.Kind != resp.Int {
				c.g.stats.badReplies.Add(1)
				w.Error("ERR a storage server's reply to " + string(name) + " is no integer")
				return
			}
			n += v.Int
		}
		w.Int(n)
	})
}

func mgetCmd(c *client, _ *command, args [][]byte) reply {
	return c.fanOut(args[1:], false, func(key []byte) fabric.Request {
		return fabric.Request{Op: dc.OpGet, Key: key}
	}, func(rs []fabric.Result, w *resp.Writer) {
		for _, r := range rs { // a key of another type reads as nil in MGET, as in Redis
			if fe, ok := r.Err.(*fabric.Error); r.Err != nil && (!ok || fe.Status != dc.StatusWrongType) {
				c.fabricError(r.Err, w)
				return
			}
		}
		w.ArrayLen(len(rs))
		for _, r := range rs {
			c.g.countHit(r)
			if r.Err != nil || r.Status == dc.StatusNotFound {
				w.Nil()
			} else {
				w.Bulk(r.Value)
			}
		}
	})
}

func msetCmd(c *client, cmd *command, args [][]byte) reply {
	if len(args)%2 != 1 {
		return c.errorf("ERR wrong number of arguments for '%s' command", cmd.name)
	}
	multi := &later{make: func(rs []fabric.Result, w *resp.Writer) {
		if c.firstError(rs, w) {
			return
		}
		w.Status("OK")
	}}
	for i := 1; i+1 < len(args); i += 2 {
		key, value := args[i], args[i+1]
		c.order([][]byte{key}, []bool{true}, func() reply {
			call := c.g.fabric.Go(fabric.Request{Op: dc.OpPut, Key: key, Value: value})
			multi.calls = append(multi.calls, call)
			return &later{calls: []*fabric.Call{call}}
		})
	}
	return multi
}
