package main

// One client connection. Its commands are read a buffer at a time (every complete command the client has
// sent), and handled as a batch: each command is turned into fabric requests at once, before the first reply
// is awaited (so a pipeline's requests are in flight together), then the replies are written in order with
// one write. Within a batch a command waits for the earlier commands on the same key unless both only read
// (so a read after a write in one pipeline sees the write, and a write after a read does not overtake it).
// The next batch is read only once this one's replies are written: a client that sends without reading
// stops being read when its socket's buffers fill, as Redis stops a client at its output-buffer limit.

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"distcache/internal/dc"
	"distcache/internal/fabric"
	"distcache/internal/resp"
)

// reply is one command's answer-to-be: render waits for what it needs and writes it.
type reply interface {
	render(w *resp.Writer)
	// settled waits until the command's effects are done (its fabric calls answered)
	settled()
}

// now is a reply already made.
type now struct{ data []byte }

func (r now) render(w *resp.Writer) { w.Raw(r.data) }
func (now) settled()                {}

// later is a reply made from fabric results once they came.
type later struct {
	calls []*fabric.Call
	make  func(results []fabric.Result, w *resp.Writer)
}

func (r *later) settled() {
	for _, c := range r.calls {
		<-c.Done()
	}
}

func (r *later) render(w *resp.Writer) {
	results := make([]fabric.Result, len(r.calls))
	for i, c := range r.calls {
		results[i] = c.Wait()
	}
	r.make(results, w)
}

// client is one connection's state.
type client struct {
	g       *Gateway
	conn    net.Conn
	id      int64
	proto   int
	authed  bool
	name    string
	libName string
	libVer  string
	created time.Time
	last    atomic.Int64 // unix nanoseconds of the last command
	lastCmd atomic.Value // string
	closing bool
	inMulti bool // after a MULTI (refused), until EXEC or DISCARD
	// per batch: the replies of earlier commands by key, to order a batch's commands on one key
	lastWrite map[string]reply
	reads     map[string][]reply
}

func (g *Gateway) serveConn(conn net.Conn) {
	defer g.wg.Done()
	c := &client{g: g, conn: conn, id: g.nextID.Add(1), proto: 2, authed: g.opts.password == "",
		created: time.Now(), lastWrite: map[string]reply{}, reads: map[string][]reply{}}
	c.last.Store(time.Now().UnixNano())
	c.lastCmd.Store("NULL")
	g.addClient(c)
	defer g.removeClient(c)
	defer conn.Close()
	in := &capped{Conn: conn, g: g}
	defer in.release()
	rd := redcon.NewReader(in)
	w := resp.Writer{Proto: 2}
	for {
		cmds, err := rd.ReadCommands()
		in.release() // what it read is commands now (or a command's first part, counted again as it comes)
		if errors.Is(err, errQueryBuffer) {
			g.stats.queryLimited.Add(1)
			w.Buf = w.Buf[:0]
			w.Error("ERR " + err.Error())
			_, _ = conn.Write(w.Buf)
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !isClosed(err) {
				if msg := err.Error(); strings.HasPrefix(msg, "Protocol error") {
					g.stats.protocolErrors.Add(1)
					w.Buf = w.Buf[:0]
					w.Error("ERR " + msg)
					_, _ = conn.Write(w.Buf)
				}
			}
			return
		}
		replies := make([]reply, 0, len(cmds))
		for _, cmd := range cmds {
			replies = append(replies, c.dispatch(cmd.Args))
			if c.closing {
				break
			}
		}
		w.Buf = w.Buf[:0]
		for _, r := range replies {
			w.Proto = c.proto
			r.render(&w)
		}
		clear(c.lastWrite)
		clear(c.reads)
		if _, err := conn.Write(w.Buf); err != nil {
			return
		}
		if cap(w.Buf) > 1<<20 { // a batch's large reply is not kept for the next
			w.Buf = nil
		}
		if c.closing {
			return
		}
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// maxQuery is the most a connection may send of one batch of commands before its end (a command carrying a
// value of the wire's largest, and room for its arguments), as Redis' client-query-buffer-limit.
const maxQuery = dc.MaxValue + dc.FrameSlack

var errQueryBuffer = errors.New("the client's query buffer is over its limit (a command past 512 MB, or the " +
	"gateway's --query-budget for all connections at once): the connection is closed")

// capped counts what a connection's reader takes in before it makes commands of it: past maxQuery for the
// connection, or past the gateway's budget for all of them, the read fails and the connection is closed.
type capped struct {
	net.Conn
	g    *Gateway
	held int64
}

func (r *capped) Read(p []byte) (int, error) {
	if r.held > maxQuery || r.g.queryBytes.Load() > r.g.opts.queryBudget {
		return 0, errQueryBuffer
	}
	n, err := r.Conn.Read(p)
	r.held += int64(n)
	r.g.queryBytes.Add(int64(n))
	return n, err
}

func (r *capped) release() {
	r.g.queryBytes.Add(-r.held)
	r.held = 0
}

// order makes the command about to run on keys wait for the batch's earlier commands it must follow: a read
// follows the last write of its key, a write follows everything on its key. Then it records itself.
func (c *client) order(keys [][]byte, writes []bool, r func() reply) reply {
	for i, k := range keys {
		key := string(k)
		if w := c.lastWrite[key]; w != nil {
			w.settled()
		}
		if writes[i] {
			for _, rd := range c.reads[key] {
				rd.settled()
			}
		}
	}
	out := r()
	for i, k := range keys {
		key := string(k)
		if writes[i] {
			c.lastWrite[key] = out
			delete(c.reads, key)
		} else {
			c.reads[key] = append(c.reads[key], out)
		}
	}
	return out
}

func (g *Gateway) addClient(c *client) {
	g.mu.Lock()
	g.clients[c.id] = c
	g.mu.Unlock()
	g.stats.connections.Add(1)
}

func (g *Gateway) removeClient(c *client) {
	g.mu.Lock()
	delete(g.clients, c.id)
	g.mu.Unlock()
	slog.Debug("client gone", "id", c.id)
}
