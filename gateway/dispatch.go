package main

// Dispatch: each command is checked as Redis checks it (known, authenticated, arity), then handled by the
// gateway's own handler (the strings family's fast paths, the multi-key commands it fans out, the
// connection's probes), or run by its key's storage server through protocol v2's executor (any other command
// whose keys are one key), or refused with the reason.

import (
	"fmt"
	"strings"

	"distcache/internal/dc"
	"distcache/internal/fabric"
	"distcache/internal/resp"
)

type handler func(c *client, cmd *command, args [][]byte) reply

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"get": getCmd, "set": setCmd, "del": deleteCmd, "unlink": deleteCmd, "mget": mgetCmd, "mset": msetCmd,
		"exists": countCmd, "touch": countCmd,
		"ping": pingCmd, "echo": echoCmd, "quit": quitCmd, "reset": resetCmd, "select": selectCmd,
		"hello": helloCmd, "auth": authCmd, "client": clientCmd, "info": infoCmd, "config": configCmd,
		"command": commandCmd, "time": timeCmd,
	}
}

// refusals are the commands the gateway does not run, and why (Redis' words where Redis Cluster has some).
var refusals = map[string]string{
	"subscribe": "Pub/Sub", "psubscribe": "Pub/Sub", "ssubscribe": "Pub/Sub", "publish": "Pub/Sub",
	"spublish": "Pub/Sub", "pubsub": "Pub/Sub", "unsubscribe": "Pub/Sub", "punsubscribe": "Pub/Sub",
	"sunsubscribe": "Pub/Sub",
	"eval":         "scripts", "evalsha": "scripts", "eval_ro": "scripts", "evalsha_ro": "scripts", "fcall": "scripts",
	"fcall_ro": "scripts", "function": "scripts", "script": "scripts",
	"watch": "transactions", "unwatch": "transactions",
}

// transaction answers MULTI, EXEC and DISCARD, and what a client sends between them. The gateway runs no
// transactions: MULTI is refused, and until EXEC or DISCARD every command is refused too (none is applied),
// EXEC then aborts, as Redis aborts a transaction a command of which was refused; so a client that pipelines
// MULTI, its commands and EXEC gets errors and changes nothing. False: not a transaction's business.
func (c *client) transaction(name string) (reply, bool) {
	why := "the DistCache gateway runs no transactions (a storage server's executor runs one command on one key)"
	switch {
	case name == "multi" && c.inMulti:
		return c.errorf("ERR MULTI calls can not be nested"), true
	case name == "multi":
		c.inMulti = true
		return c.errorf("ERR MULTI is not available: %s; the commands up to EXEC or DISCARD are refused", why), true
	case name == "exec" && c.inMulti:
		c.inMulti = false
		return c.errorf("EXECABORT Transaction discarded because of previous errors: %s", why), true
	case name == "exec":
		return c.errorf("ERR EXEC without MULTI"), true
	case name == "discard" && c.inMulti:
		c.inMulti = false
		return ok(c), true
	case name == "discard":
		return c.errorf("ERR DISCARD without MULTI"), true
	case c.inMulti && name != "quit" && name != "reset":
		return c.errorf("ERR %s not run: it follows a MULTI, and %s", strings.ToUpper(name), why), true
	}
	return nil, false
}

func errReply(proto int, msg string) reply {
	w := resp.Writer{Proto: proto}
	w.Error(msg)
	return now{w.Buf}
}

func (c *client) errorf(format string, args ...any) reply {
	return errReply(c.proto, fmt.Sprintf(format, args...))
}

// unknownCommand is Redis' words for a command it does not know.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		s := string(a)
		if room := 128 - b.Len(); len(s) > room {
			s = s[:room]
		}
		b.WriteString("'" + s + "' ")
	}
	name := string(args[0])
	if len(name) > 128 {
		name = name[:128]
	}
	return fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", name, b.String())
}

func (c *client) dispatch(args [][]byte) reply {
	g := c.g
	g.stats.commands.Add(1)
	if len(args) == 0 {
		return now{}
	}
	cmd := g.table.resolve(args)
	name := strings.ToLower(string(args[0]))
	c.lastCmd.Store(name)
	if cmd == nil {
		g.stats.rejected.Add(1)
		return c.errorf("%s", unknownCommand(args))
	}
	if name == "client" && len(args) >= 2 && strings.EqualFold(string(args[1]), "setinfo") {
		if !c.authed {
			return c.errorf("NOAUTH Authentication required.")
		}
		return setInfo(c, args) // Redis 7.2's, which clients send as they connect
	}
	if len(cmd.subs) > 0 && len(args) >= 2 && cmd.name == name {
		// a container whose subcommand Redis does not know
		g.stats.rejected.Add(1)
		return c.errorf("ERR unknown subcommand '%.128s'. Try %s HELP.", args[1], strings.ToUpper(name))
	}
	if !c.authed && !cmd.flags["no_auth"] {
		g.stats.rejected.Add(1)
		return c.errorf("NOAUTH Authentication required.")
	}
	if r, done := c.transaction(cmd.name); done {
		g.stats.rejected.Add(1)
		return r
	}
	if !cmd.arityOK(len(args)) {
		g.stats.rejected.Add(1)
		return c.errorf("ERR wrong number of arguments for '%s' command", cmd.name)
	}
	g.countCommand(cmd.name)
	top := strings.SplitN(cmd.name, "|", 2)[0]
	if h := handlers[top]; h != nil {
		return h(c, cmd, args)
	}
	if why, ok := refusals[top]; ok {
		return c.errorf("ERR %s is not available through the DistCache gateway: it runs no %s (a storage server's "+
			"executor runs one command on one key)", strings.ToUpper(top), why)
	}
	if cmd.flags["blocking"] {
		return c.errorf("ERR %s is not available through the DistCache gateway: blocking commands are not run "+
			"(a storage server's executor answers every command at once)", strings.ToUpper(top))
	}
	return c.execute(cmd, args)
}

// execute runs a command on its key's storage server (protocol v2's EXEC), its reply Redis' own.
func (c *client) execute(cmd *command, args [][]byte) reply {
	pos, writes := cmd.keys(args)
	if len(pos) == 0 {
		return c.errorf("ERR %s is not available through the DistCache gateway: it names no key, and the gateway "+
			"runs a command at its key's storage server", strings.ToUpper(cmd.name))
	}
	key := args[pos[0]]
	write, several := false, false
	for i, p := range pos {
		if string(args[p]) != string(key) {
			several = true
			if c.g.fabric.Server(args[p]) != c.g.fabric.Server(key) {
				return c.errorf("CROSSSLOT Keys in request don't hash to the same storage server (%s names keys of "+
					"more than one; the gateway fans out only MGET, MSET, DEL, UNLINK, EXISTS and TOUCH)",
					strings.ToUpper(cmd.name))
			}
		}
		write = write || writes[i]
	}
	if several {
		return c.errorf("ERR %s with more than one key is not available through the DistCache gateway yet: a "+
			"storage server's executor runs commands on one key", strings.ToUpper(cmd.name))
	}
	write = write || cmd.flags["write"]
	return c.order([][]byte{key}, []bool{write}, func() reply {
		call := c.g.fabric.Go(fabric.Request{Op: dc.OpExec, Key: key, Args: args})
		return &later{calls: []*fabric.Call{call}, make: func(rs []fabric.Result, w *resp.Writer) {
			c.execReply(args, rs[0], w)
		}}
	})
}

// execReply writes what the executor answered: Redis' reply (RESP2 as its script saw it) in the client's
// protocol, or the fabric's error.
func (c *client) execReply(args [][]byte, r fabric.Result, w *resp.Writer) {
	if r.Err != nil {
		c.fabricError(r.Err, w)
		return
	}
	v, _, err := resp.Parse(r.Value)
	if err != nil {
		c.g.stats.badReplies.Add(1)
		w.Error("ERR the storage server's reply does not parse: " + err.Error())
		return
	}
	if sh := reshape(args, v); sh.differ && w.Proto == 3 {
		w.Value(sh.resp3)
	} else {
		w.Value(sh.v)
	}
}

// fabricError writes a fabric error in Redis' format: the server's own RESP error where it gave one.
func (c *client) fabricError(err error, w *resp.Writer) {
	fe, ok := err.(*fabric.Error)
	if !ok {
		w.Error("ERR " + err.Error())
		return
	}
	switch {
	case fe.Timeout:
		c.g.stats.timeouts.Add(1)
		w.Error("ERR " + fe.Msg)
	case fe.Status == dc.StatusWrongType:
		w.Error(strings.TrimPrefix(strings.TrimRight(string(fe.Value), "\r\n"), "-"))
	case fe.Status == dc.StatusBadRequest && len(fe.Value) > 1 && fe.Value[0] == '-':
		w.Error(strings.TrimRight(string(fe.Value[1:]), "\r\n"))
	case fe.Status == dc.StatusBusy:
		w.Error("TRYAGAIN " + fe.Msg)
	default:
		w.Error("ERR " + fe.Msg)
	}
}
