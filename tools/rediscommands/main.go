// Command rediscommands writes what a redis-server says of its commands, as the gateway answers clients'
// COMMAND probes and dispatches by (make build runs it against Debian's redis-server, the storage servers'):
// the raw replies to COMMAND and COMMAND DOCS in RESP2 and in RESP3, one file each.
//
//	rediscommands -socket /path/redis.sock -out gateway/redisdata
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"distcache/internal/resp"
)

func main() {
	socket := flag.String("socket", "", "the redis-server's Unix socket")
	out := flag.String("out", "", "folder to write command.resp2, command.resp3, docs.resp2 and docs.resp3 into")
	flag.Parse()
	if *socket == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "rediscommands: error: give -socket and -out (see rediscommands -h)")
		os.Exit(2)
	}
	if err := dump(*socket, *out); err != nil {
		fmt.Fprintf(os.Stderr, "rediscommands: %v\n", err)
		os.Exit(1)
	}
}

func dump(socket, out string) error {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var buf []byte
	ask := func(args ...string) ([]byte, error) {
		req := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(req)); err != nil {
			return nil, err
		}
		chunk := make([]byte, 1<<16)
		for {
			v, n, err := resp.Parse(buf)
			if err == nil {
				reply := buf[:n]
				buf = buf[n:]
				if v.Kind == resp.Err {
					return nil, fmt.Errorf("%v: %s", args, v.Str)
				}
				return reply, nil
			}
			if !errors.Is(err, resp.ErrIncomplete) {
				return nil, err
			}
			k, err := conn.Read(chunk)
			if err != nil {
				return nil, err
			}
			buf = append(buf, chunk[:k]...)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, proto := range []string{"2", "3"} {
		if _, err := ask("HELLO", proto); err != nil {
			return err
		}
		for file, args := range map[string][]string{"command": {"COMMAND"}, "docs": {"COMMAND", "DOCS"}} {
			reply, err := ask(args...)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, file+".resp"+proto), reply, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
