package main

// What clients send about the connection and the server as they connect and while they run (PING, HELLO,
// AUTH, CLIENT, INFO, CONFIG GET, COMMAND, SELECT...), answered by the gateway itself as Redis answers them:
// some clients drop a connection whose probe fails.

import (
	"crypto/subtle"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"distcache/internal/resp"
)

// redisVersion is the version the gateway says it speaks: its command table's (Debian 12's redis-server)
const redisVersion = "7.0.15"

func ok(c *client) reply {
	w := resp.Writer{Proto: c.proto}
	w.Status("OK")
	return now{w.Buf}
}

func pingCmd(c *client, _ *command, args [][]byte) reply {
	w := resp.Writer{Proto: c.proto}
	if len(args) > 2 {
		return c.errorf("ERR wrong number of arguments for 'ping' command")
	}
	if len(args) == 2 {
		w.Bulk(args[1])
	} else {
		w.Status("PONG")
	}
	return now{w.Buf}
}

func echoCmd(c *client, _ *command, args [][]byte) reply {
	w := resp.Writer{Proto: c.proto}
	w.Bulk(args[1])
	return now{w.Buf}
}

func quitCmd(c *client, _ *command, _ [][]byte) reply {
	c.closing = true
	return ok(c)
}

func resetCmd(c *client, _ *command, _ [][]byte) reply {
	c.proto, c.name, c.inMulti = 2, "", false
	c.authed = c.g.opts.password == ""
	w := resp.Writer{Proto: 2}
	w.Status("RESET")
	return now{w.Buf}
}

func selectCmd(c *client, _ *command, args [][]byte) reply {
	n, err := strconv.Atoi(string(args[1]))
	if err != nil {
		return c.errorf("ERR value is not an integer or out of range")
	}
	if n != 0 { // one database, as in Redis Cluster
		return c.errorf("ERR SELECT is not allowed in cluster mode")
	}
	return ok(c)
}

func timeCmd(c *client, _ *command, _ [][]byte) reply {
	t := time.Now()
	w := resp.Writer{Proto: c.proto}
	w.ArrayLen(2)
	w.BulkString(strconv.FormatInt(t.Unix(), 10))
	w.BulkString(strconv.FormatInt(int64(t.Nanosecond()/1000), 10))
	return now{w.Buf}
}

// checkPassword: the default user's password (the gateway's --password-file); user must be "default".
func (c *client) checkPassword(user, password []byte) reply {
	if c.g.opts.password == "" {
		if user == nil {
			return c.errorf("ERR AUTH <password> called without any password configured for the default user. " +
				"Are you sure your configuration is correct?")
		}
		if string(user) == "default" {
			c.authed = true
			return nil
		}
	}
	if (user == nil || string(user) == "default") &&
		subtle.ConstantTimeCompare(password, []byte(c.g.opts.password)) == 1 {
		c.authed = true
		return nil
	}
	c.g.stats.authFailures.Add(1)
	return c.errorf("WRONGPASS invalid username-password pair or user is disabled.")
}

func authCmd(c *client, _ *command, args [][]byte) reply {
	var r reply
	switch len(args) {
	case 2:
		r = c.checkPassword(nil, args[1])
	case 3:
		r = c.checkPassword(args[1], args[2])
	default:
		return c.errorf("ERR syntax error")
	}
	if r != nil {
		return r
	}
	return ok(c)
}

func helloCmd(c *client, _ *command, args [][]byte) reply {
	proto := c.proto
	if len(args) >= 2 {
		n, err := strconv.Atoi(string(args[1]))
		if err != nil {
			return c.errorf("ERR Protocol version is not an integer or out of range")
		}
		if n != 2 && n != 3 {
			return c.errorf("NOPROTO unsupported protocol version")
		}
		proto = n
	}
	name := c.name
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "AUTH" && i+2 < len(args):
			if r := c.checkPassword(args[i+1], args[i+2]); r != nil {
				return r
			}
			i += 2
		case opt == "SETNAME" && i+1 < len(args):
			if !validName(args[i+1]) {
				return c.errorf("ERR Client names cannot contain spaces, newlines or special characters.")
			}
			name = string(args[i+1])
			i++
		default:
			return c.errorf("ERR Syntax error in HELLO option '%s'", args[i])
		}
	}
	if !c.authed {
		return c.errorf("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO " +
			"<proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP " +
			"protocol version at the same time")
	}
	c.proto, c.name = proto, name
	w := resp.Writer{Proto: proto}
	w.MapLen(7)
	w.BulkString("server")
	w.BulkString("redis")
	w.BulkString("version")
	w.BulkString(redisVersion)
	w.BulkString("proto")
	w.Int(int64(proto))
	w.BulkString("id")
	w.Int(c.id)
	w.BulkString("mode")
	w.BulkString("standalone")
	w.BulkString("role")
	w.BulkString("master")
	w.BulkString("modules")
	w.ArrayLen(0)
	return now{w.Buf}
}

func validName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

// info is CLIENT INFO's line for c, in Redis' fields.
func (c *client) info() string {
	idle := time.Since(time.Unix(0, c.last.Load())) / time.Second
	local := ""
	if a := c.conn.LocalAddr(); a != nil {
		local = a.String()
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=-1 name=%s age=%d idle=%d flags=N db=0 sub=0 psub=0 ssub=0 "+
		"multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r "+
		"cmd=%s user=default redir=-1 resp=%d lib-name=%s lib-ver=%s\n", c.id, c.conn.RemoteAddr(), local, c.name,
		int64(time.Since(c.created)/time.Second), int64(idle), c.lastCmd.Load(), c.proto, c.libName, c.libVer)
}

func clientCmd(c *client, cmd *command, args [][]byte) reply {
	w := resp.Writer{Proto: c.proto}
	switch cmd.name {
	case "client|setname":
		if !validName(args[2]) {
			return c.errorf("ERR Client names cannot contain spaces, newlines or special characters.")
		}
		c.name = string(args[2])
		return ok(c)
	case "client|getname":
		if c.name == "" {
			w.Nil()
		} else {
			w.BulkString(c.name)
		}
	case "client|id":
		w.Int(c.id)
	case "client|info":
		w.Verbatim("txt", c.info())
	case "client|list":
		c.g.mu.Lock()
		ids := make([]int64, 0, len(c.g.clients))
		for id := range c.g.clients {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(c.g.clients[id].info())
		}
		c.g.mu.Unlock()
		w.Verbatim("txt", b.String())
	case "client|no-evict", "client|no-touch":
		return ok(c)
	case "client|reply":
		if !strings.EqualFold(string(args[2]), "on") {
			return c.errorf("ERR CLIENT REPLY OFF and SKIP are not available through the DistCache gateway")
		}
		return ok(c)
	case "client|help":
		w.ArrayLen(1)
		w.Status("CLIENT <subcommand>: SETNAME, GETNAME, SETINFO, ID, INFO, LIST, NO-EVICT, NO-TOUCH, REPLY ON")
	default:
		return c.errorf("ERR %s is not available through the DistCache gateway", strings.ToUpper(
			strings.ReplaceAll(cmd.name, "|", " ")))
	}
	return now{w.Buf}
}

// setInfo is CLIENT SETINFO (Redis 7.2; Debian's 7.0 has none, but clients send it as they connect).
func setInfo(c *client, args [][]byte) reply {
	if len(args) != 4 {
		return c.errorf("ERR wrong number of arguments for 'client|setinfo' command")
	}
	attr, value := strings.ToLower(string(args[2])), string(args[3])
	if !validName(args[3]) && value != "" {
		return c.errorf("ERR %s cannot contain spaces, newlines or special characters.", attr)
	}
	switch attr {
	case "lib-name":
		c.libName = value
	case "lib-ver":
		c.libVer = value
	default:
		return c.errorf("ERR Unrecognized option '%s'", args[2])
	}
	return ok(c)
}

// configParams are what CONFIG GET answers: the gateway's view of the store it fronts.
func (g *Gateway) configParams() [][2]string {
	return [][2]string{
		{"databases", "1"}, {"maxclients", strconv.Itoa(g.opts.maxClients)}, {"timeout", "0"},
		{"proto-max-bulk-len", "536870912"}, {"save", ""}, {"appendonly", "yes"}, {"appendfsync", "always"},
		{"port", strconv.Itoa(g.port)}, {"bind", g.opts.listenHost}, {"cluster-enabled", "no"},
	}
}

func configCmd(c *client, cmd *command, args [][]byte) reply {
	if cmd.name != "config|get" {
		return c.errorf("ERR %s is not available through the DistCache gateway: configure the storage "+
			"servers' redis-server (the cluster file) and the gateway's own options", strings.ToUpper(
			strings.ReplaceAll(cmd.name, "|", " ")))
	}
	var pairs [][2]string
	for _, p := range c.g.configParams() {
		for _, pat := range args[2:] {
			if m, _ := path.Match(strings.ToLower(string(pat)), p[0]); m {
				pairs = append(pairs, p)
				break
			}
		}
	}
	w := resp.Writer{Proto: c.proto}
	w.MapLen(len(pairs))
	for _, p := range pairs {
		w.BulkString(p[0])
		w.BulkString(p[1])
	}
	return now{w.Buf}
}

func commandCmd(c *client, cmd *command, args [][]byte) reply {
	t := c.g.table
	w := resp.Writer{Proto: c.proto}
	p := 0
	if c.proto == 3 {
		p = 1
	}
	switch cmd.name {
	case "command":
		w.Raw(t.all[p])
	case "command|count":
		w.Int(int64(len(t.byName)))
	case "command|list":
		w.ArrayLen(len(t.order))
		for _, n := range t.order {
			w.BulkString(n)
		}
	case "command|info":
		names := args[2:]
		if len(names) == 0 {
			w.Raw(t.all[p])
			break
		}
		w.ArrayLen(len(names))
		for _, n := range names {
			if e := t.lookup(string(n)); e != nil {
				w.Raw(e.raw[p])
			} else {
				w.NilArray()
			}
		}
	case "command|docs":
		var parts [][]byte
		for _, n := range args[2:] {
			if e := t.lookup(string(n)); e != nil && e.docsRaw[p] != nil {
				parts = append(parts, e.docsRaw[p])
			}
		}
		if len(args) == 2 {
			for _, n := range t.order {
				if e := t.byName[n]; e.docsRaw[p] != nil {
					parts = append(parts, e.docsRaw[p])
				}
			}
		}
		w.MapLen(len(parts))
		for _, part := range parts {
			w.Raw(part)
		}
	case "command|getkeys", "command|getkeysandflags":
		inner := t.resolve(args[2:])
		if inner == nil {
			return c.errorf("ERR Invalid command specified")
		}
		if !inner.arityOK(len(args) - 2) {
			return c.errorf("ERR Invalid number of arguments specified for command")
		}
		pos, _ := inner.keys(args[2:])
		if len(pos) == 0 {
			return c.errorf("ERR The command has no key arguments")
		}
		w.ArrayLen(len(pos))
		for _, i := range pos {
			w.Bulk(args[2+i])
		}
	default:
		return c.errorf("ERR %s is not available through the DistCache gateway", strings.ToUpper(
			strings.ReplaceAll(cmd.name, "|", " ")))
	}
	return now{w.Buf}
}

// infoCmd is INFO: Redis' sections where they mean something for the gateway, and the fabric's.
func infoCmd(c *client, _ *command, args [][]byte) reply {
	g := c.g
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	up := time.Since(g.started)
	host, _ := os.Hostname()
	section("Server", "redis_version:"+redisVersion, "redis_mode:standalone", "distcache_gateway:1",
		"os:"+runtime.GOOS+" "+runtime.GOARCH, "arch_bits:64", "process_id:"+strconv.Itoa(os.Getpid()),
		"tcp_port:"+strconv.Itoa(g.port), "uptime_in_seconds:"+strconv.FormatInt(int64(up/time.Second), 10),
		"uptime_in_days:"+strconv.FormatInt(int64(up/(24*time.Hour)), 10), "hostname:"+host)
	g.mu.Lock()
	clients := len(g.clients)
	g.mu.Unlock()
	section("Clients", "connected_clients:"+strconv.Itoa(clients), "maxclients:"+strconv.Itoa(g.opts.maxClients),
		"blocked_clients:0")
	st := &g.stats
	fs := g.fabric.Stats()
	section("Stats", "total_connections_received:"+strconv.FormatUint(st.connections.Load(), 10),
		"total_commands_processed:"+strconv.FormatUint(st.commands.Load(), 10),
		"rejected_connections:"+strconv.FormatUint(st.refusedConns.Load(), 10),
		"keyspace_hits:"+strconv.FormatUint(st.hits.Load(), 10),
		"keyspace_misses:"+strconv.FormatUint(st.misses.Load(), 10),
		"total_error_replies:"+strconv.FormatUint(st.rejected.Load(), 10),
		"unexpected_error_replies:"+strconv.FormatUint(st.badReplies.Load(), 10))
	section("Replication", "role:master", "connected_slaves:0")
	section("DistCache", "storage_servers:"+strconv.Itoa(len(g.opts.cluster.ServerNames())),
		"cache_hits:"+strconv.FormatUint(st.hits.Load(), 10),
		"cache_misses:"+strconv.FormatUint(st.misses.Load(), 10),
		"fabric_requests:"+strconv.FormatUint(fs.Requests, 10),
		"fabric_copies:"+strconv.FormatUint(fs.Copies, 10),
		"fabric_timeouts:"+strconv.FormatUint(fs.Timeouts, 10),
		"fabric_streamed:"+strconv.FormatUint(fs.Streamed, 10),
		"fabric_ignored:"+strconv.FormatUint(fs.Ignored, 10),
		"protocol_errors:"+strconv.FormatUint(st.protocolErrors.Load(), 10))
	w := resp.Writer{Proto: c.proto}
	w.Verbatim("txt", b.String())
	return now{w.Buf}
}
