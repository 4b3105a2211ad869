package main

// The shim's Redis: one rueidis client on the user database (0) and one on the shim's own (markerDB: dedup
// markers, the coherence floor, the names of cached keys), both pipelining every command of every goroutine
// onto one connection each; the batch path sends a whole batch's commands as one DoMulti, one round trip.
//
// A write and its dedup marker land in one MULTI/EXEC (a DELETE's as one Lua script inside it: its marker holds
// whether the key existed; SELECT inside a script selects for the script only, Redis 7), so a restarted shim can
// tell a retried write was applied (docs/protocol.md). A script alone goes as EVALSHA and, where Redis answers
// NOSCRIPT (a restarted Redis forgot it), once more as EVAL: NOSCRIPT ran nothing.

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"distcache/internal/dc"
)

const userDB = 0

// script is a Lua script known by its SHA1.
type script struct{ body, sha string }

func newScript(body string) *script {
	h := sha1.Sum([]byte(body))
	return &script{body: body, sha: hex.EncodeToString(h[:])}
}

// A DELETE and its marker in one step: the marker holds DEL's result (1: the key existed, 0: NOT_FOUND).
var errShortExec = errors.New("EXEC answered fewer replies than the transaction had writes")

var delWithMarker = newScript("local n = redis.call('DEL', KEYS[1]); redis.call('SELECT', ARGV[2]); " +
	"redis.call('SET', KEYS[2], n, 'PX', ARGV[1]); redis.call('SELECT', ARGV[3]); return n")

const (
	markerOK    = dc.MarkerOK    // what a PUT's marker holds (a DELETE's: "1" or "0")
	markerError = dc.MarkerError // a write answered ERROR: nothing was written, and a retry must not write it either
	markerBusy  = dc.MarkerBusy  // a write refused BUSY: not written, and a retry must not write it
	markerReply = dc.MarkerReply // an EXEC's marker: this byte, then the reply it had (RESP)
)

// call is one command of a batch: a plain command, or a script with its keys and arguments.
type call struct {
	cmd        rueidis.Completed
	scr        *script
	keys, args []string
}

type store struct {
	data, markers rueidis.Client
	markerMS      int64
}

func dialer(rawURL string) (func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error), string) {
	network, address, _ := redisTarget(rawURL)
	return func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return d.DialContext(ctx, network, address)
	}, address
}

func openStore(o *Options, markerTTL time.Duration) (*store, error) {
	dial, address := dialer(o.RedisURL)
	password := ""
	if o.RedisPasswordFile != "" {
		raw, err := os.ReadFile(o.RedisPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-password-file: %v", err)
		}
		password = strings.TrimSpace(string(raw))
	}
	open := func(db int) (rueidis.Client, error) {
		return rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{address}, DialCtxFn: dial, Username: o.RedisUser, Password: password,
			SelectDB: db, DisableCache: true, ForceSingleClient: true, ClientName: "distcache-shim",
			ClientSetInfo: rueidis.DisableClientSetInfo, ConnWriteTimeout: 5 * time.Second,
			Dialer: net.Dialer{Timeout: 2 * time.Second}, DisableRetry: true,
		})
	}
	data, err := open(userDB)
	if err != nil {
		return nil, fmt.Errorf("redis at %s: %v", o.RedisURL, err)
	}
	markers, err := open(markerDB)
	if err != nil {
		data.Close()
		return nil, fmt.Errorf("redis at %s: %v", o.RedisURL, err)
	}
	return &store{data: data, markers: markers, markerMS: max(1, markerTTL.Milliseconds())}, nil
}

func (s *store) close() {
	s.data.Close()
	s.markers.Close()
}

func (s *store) script(scr *script, keys, args []string) call {
	return call{scr: scr, keys: keys, args: args,
		cmd: s.data.B().Evalsha().Sha1(scr.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()}
}

func (s *store) plain(cmd rueidis.Completed) call { return call{cmd: cmd} }

// do runs calls in one pipeline on the user database (a script Redis did not know is sent again as EVAL).
func (s *store) do(ctx context.Context, calls []call) []rueidis.RedisResult {
	return s.doOn(ctx, s.data, calls)
}

// doOn is do on connection c: the shared client (every goroutine's commands pipelined onto one connection by
// rueidis' own goroutines) or a batch worker's dedicated one (written and read by the worker itself).
func (s *store) doOn(ctx context.Context, c rueidis.CoreClient, calls []call) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(calls))
	for i := range calls {
		cmds[i] = calls[i].cmd
	}
	results := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range results {
		if calls[i].scr != nil && isNoScript(r.Error()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		retry := make(rueidis.Commands, len(again))
		for j, i := range again {
			c := calls[i]
			retry[j] = s.data.B().Eval().Script(c.scr.body).Numkeys(int64(len(c.keys))).Key(c.keys...).
				Arg(c.args...).Build()
		}
		for j, r := range c.DoMulti(ctx, retry...) {
			results[again[j]] = r
		}
	}
	return results
}

func (s *store) do1(ctx context.Context, c call) rueidis.RedisResult { return s.do(ctx, []call{c})[0] }

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// isRedisUnavailable says whether err is the connection's (Redis down, slow, restarted), not a reply.
func isRedisUnavailable(err error) bool {
	if err == nil || rueidis.IsRedisNil(err) {
		return false
	}
	_, reply := rueidis.IsRedisErr(err)
	return !reply
}

// marker is what the write of marker left: markerOK (or a DELETE's "0"), markerError, markerBusy, an EXEC's
// reply, or "" with ok false if none.
func (s *store) marker(ctx context.Context, marker string) (string, bool, error) {
	v, err := s.markers.Do(ctx, s.markers.B().Get().Key(marker).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// refuse records that the write of marker was refused (outcome: markerError or markerBusy; nothing written)
// unless it was applied: ok false if recorded, else the marker the write left (its outcome stands).
func (s *store) refuse(ctx context.Context, marker, outcome string) (string, bool, error) {
	err := s.markers.Do(ctx, s.markers.B().Set().Key(marker).Value(outcome).Nx().PxMilliseconds(s.markerMS).
		Build()).Error()
	if err == nil {
		return "", false, nil
	}
	if !rueidis.IsRedisNil(err) {
		return "", false, err
	}
	v, ok, err := s.marker(ctx, marker)
	if err == nil && !ok { // expired between the two: recorded nowhere, so record it now
		return s.refuse(ctx, marker, outcome)
	}
	return v, ok, err
}

// floor is the coherence floor earlier lives persisted (nil: none, or unreadable).
func (s *store) floor(ctx context.Context) (*uint64, error) {
	v, err := s.markers.Do(ctx, s.markers.B().Get().Key(seqFloorKey).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil {
		return nil, nil
	}
	return &n, nil
}

func (s *store) setFloor(ctx context.Context, n uint64) error {
	return s.markers.Do(ctx, s.markers.B().Set().Key(seqFloorKey).Value(strconv.FormatUint(n, 10)).Build()).Error()
}

// runID is the redis-server's run_id (a new one: Redis restarted).
func (s *store) runID(ctx context.Context) (string, error) {
	info, err := s.data.Do(ctx, s.data.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", errors.New("INFO server has no run_id")
}

// valueOf is a key's value and whether it has a time to live, read in one step (MULTI: GET, PTTL), so a TTL
// set by a write just before or after cannot slip between them; wrongType for another type than a string.
func (s *store) valueOf(ctx context.Context, key []byte) (value []byte, found, expires, wrongType bool, err error) {
	k := string(key)
	res := s.data.DoMulti(ctx, s.data.B().Multi().Build(), s.data.B().Get().Key(k).Build(),
		s.data.B().Pttl().Key(k).Build(), s.data.B().Exec().Build())
	arr, err := res[3].ToArray()
	if err != nil {
		return nil, false, false, false, err
	}
	if len(arr) != 2 {
		return nil, false, false, false, fmt.Errorf("EXEC answered %d replies", len(arr))
	}
	ttl, _ := arr[1].AsInt64()
	v, gerr := arr[0].AsBytes()
	if rueidis.IsRedisNil(gerr) {
		return nil, false, ttl >= 0, false, nil
	}
	if _, isErr := rueidis.IsRedisErr(gerr); isErr {
		return nil, false, false, true, nil
	}
	if gerr != nil {
		return nil, false, false, false, gerr
	}
	return v, true, ttl >= 0, false, nil
}
