// Command lincheck checks a recorded key-value history for linearizability,
// using the porcupine checker (github.com/anishathalye/porcupine).
//
// Usage:
//
//	lincheck --history H.jsonl [--html OUT.html] [--timeout 120s]
//
// # Input
//
// JSON Lines, one completed or attempted client operation per line:
//
//	{"client": 3, "key": "k1", "op": "put", "value": "v7", "call": 1000, "return": 2500}
//	{"client": 4, "key": "k1", "op": "delete", "found": true, "call": 2600, "return": 2900}
//
//	{"client": 5, "key": "n0", "op": "incr", "value": "8", "call": 3000, "return": 3400}
//	{"client": 6, "key": "k2", "op": "hset", "value": "v9", "wrongtype": true, "call": 3100, "return": 3300}
//
// client is an integer, key a string, op one of "get", "put", "delete", "incr", "hset"; call
// and return are integer nanoseconds on one clock shared by every client. For
// put, value is the value written; for get, the value read, null meaning the
// key was absent (NOT_FOUND). A delete's output is its status: "found" is true
// when the server answered OK (the key existed and is now gone) and false when
// it answered NOT_FOUND (the key was already absent). "found" is required for
// a delete that returned, and must be null or missing for one that did not
// (return null: no status was received). A delete's "value", and "found" on a
// get or put, are ignored. A write answered ERROR wrote nothing: it is no
// operation of the register, and a line with "error": true is skipped (the
// recorder keeps it for the staleness oracle, client_lib/oracle.py). Blank lines are skipped. Any other malformed line
// stops the run with exit code 2 and names the line. Unknown extra fields are
// ignored, so recorders may add their own. Intervals are closed, as in
// porcupine: an operation returning at t overlaps one called at t. Only
// real-time order matters; operations of one client need not be sequential (a
// client may go on after a timeout).
//
// "incr" is Redis' INCR run at the key's shim: its "value" is the number it
// answered (null or missing when its outcome is unknown). "hset" is an HSET of
// one field: the key becomes a hash. Either may be answered Redis' WRONGTYPE
// ("wrongtype": true: nothing was written); a get of a hash answers WRONGTYPE
// ("wrongtype": true, "value" null).
//
// # Model
//
// Each key is an independent register whose state is either a string, a
// hash, or "absent" (the initial state): put sets a string (over a hash too,
// as SET does), delete makes it absent, incr turns absent or a decimal string
// n into n+1 and must answer it (WRONGTYPE on a hash; a string that is no
// number it leaves alone, answered an error, which the recorder marks
// "error"), hset turns absent or a hash into a hash and must answer WRONGTYPE
// on a string, a get of a hash must answer WRONGTYPE, any other get
// must return exactly the current state, and a delete must answer OK ("found":
// true) exactly when the key is present at its linearization point and
// NOT_FOUND otherwise. A client that retries a request sends it again with the
// same sequence number and records one operation, from its first call to the
// one reply it accepts; the shim applies a write once and answers every copy
// with the first copy's reply (shim/dedup.py), so the status recorded is the
// one the register had where the delete took effect. A retry applied a second
// time, or answered with a status the first application did not have, shows up
// here as a status no linearization explains. Operations on different keys
// commute and never constrain one another, so the history is linearizable iff
// every key's sub-history is; the model's Partition function splits the
// history by key and each key is checked on its own. This keeps the (NP-hard)
// search small and lets the tool name the keys that fail.
//
// # Operations whose outcome is unknown
//
// "return": null means the client gave up (timed out) without learning the
// outcome: the operation may have taken effect at any instant after its call,
// possibly long after the client stopped waiting, or never. Following
// porcupine's documented advice, such a put or delete is given a return time
// of +infinity (math.MaxInt64, later than every real timestamp) and the model
// does not look at its output (a delete's status is unconstrained). The
// checker may then place its linearization point anywhere after its call,
// including after every other operation, which is indistinguishable from it
// never taking effect. This is sound: a recorded history is reported as a
// violation only if no choice of "took effect at some time t >= call" or
// "never took effect" explains it, which is exactly the set of real behaviours
// the client could not rule out. It is not vacuous either: once a later read
// has observed the value, the write must have happened before that read, and
// it cannot be "undone" for reads after it. A get whose outcome is unknown
// returned nothing to check against, so it constrains nothing and is dropped
// (it is not counted in ops=).
//
// # Output and exit codes
//
// stdout gets exactly one line, "ops=N violations=V", where N is the number of
// operations checked and V the number of keys whose history is not
// linearizable, plus a line "unknown=U" when the check of U keys did not
// finish within --timeout (those keys are neither passed nor counted as
// violations). stderr gets "violation key=K ops=N" for up to 10 violating
// keys. Exit code: 0 when every key is linearizable; 1 when V > 0 (even if
// some keys are also unknown: a definite violation wins); 3 when V = 0 but U >
// 0; 2 on bad usage, bad input or an I/O error.
//
// --timeout bounds the wall time of the whole verdict (0: no limit). Keys are
// checked smallest first on GOMAXPROCS workers against one shared deadline, so
// one pathological key cannot starve the easy ones. With --html the history is
// checked once more, as a whole, to produce porcupine's multi-partition
// visualization (one partition per key), which may take up to another
// --timeout.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/anishathalye/porcupine"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1
	exitBadInput  = 2
	exitUnknown   = 3
)

// maxReportedKeys caps the per-key lines written to stderr.
const maxReportedKeys = 10

// unknownReturn is the return time given to a put or delete whose outcome is
// unknown: later than every real timestamp, i.e. "+infinity".
const unknownReturn int64 = math.MaxInt64

// kvInput is an operation's invocation, as the model sees it.
type kvInput struct {
	Op    string // "get", "put", "delete", "incr" or "hset"
	Key   string
	Value string // the value written, for put
}

// kvOutput is an operation's response. Found/Value are what a get read;
// Found is also a delete's status (true: OK, false: NOT_FOUND). Unknown marks
// a put or delete whose outcome was never learned: the model does not check
// its output.
type kvOutput struct {
	Found     bool
	Value     string // a get's value, an incr's answer
	Unknown   bool
	WrongType bool // answered WRONGTYPE
}

// kvState is one key's register: Present is false while the key is absent;
// Hash is true while it holds a hash (its fields are never read: Value is "").
// It is a comparable value, so porcupine may compare states with ==.
type kvState struct {
	Present bool
	Hash    bool
	Value   string
}

// number is what an incr sees: the key's value as an integer (absent: 0),
// ok false for a hash or a string that is no decimal integer.
func number(st kvState) (int64, bool) {
	if !st.Present {
		return 0, true
	}
	if st.Hash {
		return 0, false
	}
	n, err := strconv.ParseInt(st.Value, 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == st.Value
}

// stepIncr is incr's transition (see Model).
func stepIncr(st kvState, out kvOutput) (bool, kvState) {
	n, ok := number(st)
	switch {
	case !ok:
		return out.Unknown || (out.WrongType && st.Hash), st
	case out.WrongType:
		return false, st
	}
	next := kvState{Present: true, Value: strconv.FormatInt(n+1, 10)}
	return out.Unknown || out.Value == next.Value, next
}

// stepHset is hset's transition (see Model).
func stepHset(st kvState, out kvOutput) (bool, kvState) {
	if st.Present && !st.Hash { // a string: WRONGTYPE, nothing written
		return out.Unknown || out.WrongType, st
	}
	return out.Unknown || !out.WrongType, kvState{Present: true, Hash: true}
}

// kvModel returns the per-key register model described in the package doc,
// partitioned by key.
func kvModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionByKey,
		Init:      func() interface{} { return kvState{} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			st := state.(kvState)
			in := input.(kvInput)
			switch in.Op {
			case "put":
				return true, kvState{Present: true, Value: in.Value}
			case "delete":
				out := output.(kvOutput)
				return out.Unknown || out.Found == st.Present, kvState{}
			case "incr":
				return stepIncr(st, output.(kvOutput))
			case "hset":
				return stepHset(st, output.(kvOutput))
			default: // get
				out := output.(kvOutput)
				if st.Hash || out.WrongType {
					return st.Hash && out.WrongType, st
				}
				return out.Found == st.Present && (!out.Found || out.Value == st.Value), st
			}
		},
		Equal: func(a, b interface{}) bool { return a.(kvState) == b.(kvState) },
		Hash:  hashState,
		DescribeOperation: func(input, output interface{}) string {
			in := input.(kvInput)
			out := output.(kvOutput)
			var s string
			switch in.Op {
			case "put":
				s = fmt.Sprintf("put(%s)=%q", in.Key, in.Value)
			case "delete":
				s = fmt.Sprintf("delete(%s)", in.Key)
				if !out.Unknown {
					s += " -> " + deleteStatus(out.Found)
				}
			case "incr", "hset":
				s = fmt.Sprintf("%s(%s)", in.Op, in.Key)
				switch {
				case out.WrongType:
					s += " -> WRONGTYPE"
				case !out.Unknown && in.Op == "incr":
					s += " -> " + out.Value
				}
			default:
				s = fmt.Sprintf("get(%s) -> %s", in.Key, describeValue(out.Found, out.Value))
				if out.WrongType {
					s = fmt.Sprintf("get(%s) -> WRONGTYPE", in.Key)
				}
			}
			if out.Unknown {
				s += " (timed out)"
			}
			return s
		},
		DescribeState: func(state interface{}) string {
			st := state.(kvState)
			if st.Hash {
				return "a hash"
			}
			return describeValue(st.Present, st.Value)
		},
	}
}

// deleteStatus names a delete's reply status as the wire protocol does.
func deleteStatus(found bool) string {
	if found {
		return "OK"
	}
	return "NOT_FOUND"
}

func describeValue(present bool, value string) string {
	if !present {
		return "absent"
	}
	return strconv.Quote(value)
}

// hashState is an allocation-free FNV-1a hash of a state; equal states hash
// equally, as porcupine requires.
func hashState(state interface{}) uint64 {
	st := state.(kvState)
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	if !st.Present {
		return h
	}
	h = (h ^ 1) * prime
	if st.Hash {
		h = (h ^ 2) * prime
	}
	for i := 0; i < len(st.Value); i++ {
		h = (h ^ uint64(st.Value[i])) * prime
	}
	return h
}

// partitionByKey splits a history into one sub-history per key, in key order,
// keeping each key's operations in their original order.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range history {
		k := op.Input.(kvInput).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		parts[i] = byKey[k]
	}
	return parts
}

// rawOp is one input line as decoded. Pointers and RawMessage tell a missing
// field from a zero or null one.
type rawOp struct {
	Client    *int            `json:"client"`
	Key       *string         `json:"key"`
	Op        *string         `json:"op"`
	Value     json.RawMessage `json:"value"`
	Found     json.RawMessage `json:"found"`
	Call      *int64          `json:"call"`
	Return    json.RawMessage `json:"return"`
	Error     bool            `json:"error"`
	WrongType bool            `json:"wrongtype"`
}

// record is one validated input line.
type record struct {
	line    int
	client  int
	in      kvInput
	out     kvOutput
	call    int64
	ret     int64
	unknown bool // return was null
	refused bool // "error": true: a write answered ERROR, not an operation of the register
}

var errNull = errors.New("null")

// decodeString decodes a JSON string, reporting errNull for null.
func decodeString(raw json.RawMessage) (string, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", errNull
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New("must be a string or null")
	}
	return s, nil
}

// parseLine validates one non-blank line.
func parseLine(lineNo int, text []byte) (record, error) {
	var raw rawOp
	if err := json.Unmarshal(text, &raw); err != nil {
		return record{}, err
	}
	if raw.Error {
		return record{line: lineNo, refused: true}, nil
	}
	switch {
	case raw.Client == nil:
		return record{}, errors.New(`missing "client"`)
	case raw.Key == nil:
		return record{}, errors.New(`missing "key"`)
	case raw.Op == nil:
		return record{}, errors.New(`missing "op"`)
	case raw.Call == nil:
		return record{}, errors.New(`missing "call"`)
	case raw.Return == nil:
		return record{}, errors.New(`missing "return" (use null for an unknown outcome)`)
	}
	r := record{line: lineNo, client: *raw.Client, call: *raw.Call,
		in: kvInput{Op: *raw.Op, Key: *raw.Key}}

	if bytes.Equal(bytes.TrimSpace(raw.Return), []byte("null")) {
		r.unknown = true
		r.ret = unknownReturn
		r.out.Unknown = true
	} else {
		if err := json.Unmarshal(raw.Return, &r.ret); err != nil {
			return record{}, errors.New(`"return" must be an integer or null`)
		}
		if r.ret < r.call {
			return record{}, fmt.Errorf(`"return" (%d) is before "call" (%d)`, r.ret, r.call)
		}
	}

	switch r.in.Op {
	case "put":
		if raw.Value == nil {
			return record{}, errors.New(`put needs "value"`)
		}
		v, err := decodeString(raw.Value)
		if err == errNull {
			return record{}, errors.New(`put "value" must be a string, not null`)
		} else if err != nil {
			return record{}, fmt.Errorf(`"value" %v`, err)
		}
		r.in.Value = v
	case "get":
		if raw.Value == nil {
			return record{}, errors.New(`get needs "value" (null when the key was absent)`)
		}
		v, err := decodeString(raw.Value)
		if err != nil && err != errNull {
			return record{}, fmt.Errorf(`"value" %v`, err)
		}
		r.out.Found = err == nil
		r.out.Value = v
		if raw.WrongType && r.out.Found {
			return record{}, errors.New(`a get answered WRONGTYPE read nothing: "value" must be null`)
		}
		r.out.WrongType = raw.WrongType
	case "incr":
		r.out.WrongType = raw.WrongType && !r.unknown
		if r.unknown || r.out.WrongType {
			break
		}
		v, err := decodeString(raw.Value)
		if err != nil {
			return record{}, errors.New(`incr needs "value": the number it answered, as a string`)
		}
		if _, perr := strconv.ParseInt(v, 10, 64); perr != nil {
			return record{}, fmt.Errorf(`incr "value" must be a decimal integer, not %q`, v)
		}
		r.out.Value = v
	case "hset":
		r.out.WrongType = raw.WrongType && !r.unknown
	case "delete":
		found := bytes.TrimSpace(raw.Found)
		switch {
		case r.unknown:
			if found != nil && !bytes.Equal(found, []byte("null")) {
				return record{}, errors.New(`delete with "return": null has no status: "found" must be null or missing`)
			}
		case found == nil || bytes.Equal(found, []byte("null")):
			return record{}, errors.New(`delete needs "found" (true: answered OK, false: answered NOT_FOUND)`)
		default:
			if err := json.Unmarshal(found, &r.out.Found); err != nil {
				return record{}, errors.New(`"found" must be true or false`)
			}
		}
	default:
		return record{}, fmt.Errorf(`"op" must be "get", "put", "delete", "incr" or "hset", not %q`, r.in.Op)
	}
	return r, nil
}

// readHistory reads and validates every line. It returns the records to
// check (unknown-outcome gets already dropped). Errors name the line.
func readHistory(r io.Reader) ([]record, error) {
	br := bufio.NewReader(r) // ReadBytes, unlike bufio.Scanner, has no line-length cap
	var recs []record
	for lineNo := 1; ; lineNo++ {
		text, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(bytes.TrimSpace(text)) > 0 {
			rec, perr := parseLine(lineNo, text)
			if perr != nil {
				return nil, fmt.Errorf("line %d: %v", lineNo, perr)
			}
			if !rec.refused && !(rec.unknown && rec.in.Op == "get") {
				recs = append(recs, rec)
			}
		}
		if err == io.EOF {
			return recs, nil
		}
	}
}

// toOperations converts records to porcupine operations. Client ids are
// renumbered densely from 0 (porcupine's visualization draws one row per id);
// the original id and the input line go into the metadata shown on hover.
func toOperations(recs []record) []porcupine.Operation {
	ids := make(map[int]int)
	var clients []int
	for _, r := range recs {
		if _, ok := ids[r.client]; !ok {
			ids[r.client] = 0
			clients = append(clients, r.client)
		}
	}
	sort.Ints(clients)
	for i, c := range clients {
		ids[c] = i
	}
	ops := make([]porcupine.Operation, len(recs))
	for i, r := range recs {
		ops[i] = porcupine.Operation{
			ClientId: ids[r.client],
			Input:    r.in,
			Call:     r.call,
			Output:   r.out,
			Return:   r.ret,
			Metadata: fmt.Sprintf("client %d, line %d", r.client, r.line),
		}
	}
	return ops
}

// checkPartitions checks each key's sub-history on its own and returns one
// result per partition. Small partitions go first; all share one deadline
// (timeout 0: none). A partition not finished, or not started, by the
// deadline is Unknown.
func checkPartitions(model porcupine.Model, parts [][]porcupine.Operation, timeout time.Duration) []porcupine.CheckResult {
	results := make([]porcupine.CheckResult, len(parts))
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(parts[order[a]]) < len(parts[order[b]]) })

	deadline := time.Now().Add(timeout)
	next := make(chan int)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	if workers > len(parts) {
		workers = len(parts)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				budget := time.Duration(0) // porcupine: 0 = no limit
				if timeout > 0 {
					budget = time.Until(deadline)
					if budget <= 0 {
						results[i] = porcupine.Unknown
						continue
					}
				}
				results[i] = porcupine.CheckOperationsTimeout(model, parts[i], budget)
			}
		}()
	}
	for _, i := range order {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

// displayKey prints a key as is when that is unambiguous, quoted otherwise.
func displayKey(k string) string {
	if k == "" || strings.ContainsAny(k, `"=`) || strings.IndexFunc(k, func(r rune) bool {
		return unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) >= 0 {
		return strconv.Quote(k)
	}
	return k
}

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	historyPath := fs.String("history", "", "JSON Lines history to check (required)")
	htmlPath := fs.String("html", "", "also write porcupine's HTML visualization here")
	timeout := fs.Duration("timeout", 120*time.Second, "wall-time limit for the check (0: none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lincheck --history H.jsonl [--html OUT.html] [--timeout 120s]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitBadInput
	}
	if *historyPath == "" || fs.NArg() > 0 || *timeout < 0 {
		fs.Usage()
		return exitBadInput
	}

	f, err := os.Open(*historyPath)
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %v\n", err)
		return exitBadInput
	}
	recs, err := readHistory(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %s: %v\n", *historyPath, err)
		return exitBadInput
	}

	model := kvModel()
	history := toOperations(recs)
	parts := partitionByKey(history)
	results := checkPartitions(model, parts, *timeout)

	if *htmlPath != "" {
		_, info := porcupine.CheckOperationsVerbose(model, history, *timeout)
		if err := porcupine.VisualizePath(model, info, *htmlPath); err != nil {
			fmt.Fprintf(stderr, "lincheck: writing %s: %v\n", *htmlPath, err)
			return exitBadInput
		}
	}

	violations, unknown := 0, 0
	for i, res := range results {
		key := displayKey(parts[i][0].Input.(kvInput).Key)
		switch res {
		case porcupine.Illegal:
			if violations < maxReportedKeys {
				fmt.Fprintf(stderr, "violation key=%s ops=%d\n", key, len(parts[i]))
			}
			violations++
		case porcupine.Unknown:
			if unknown < maxReportedKeys {
				fmt.Fprintf(stderr, "unknown key=%s ops=%d (check did not finish within --timeout)\n", key, len(parts[i]))
			}
			unknown++
		}
	}
	if violations > maxReportedKeys {
		fmt.Fprintf(stderr, "... and %d more violating keys\n", violations-maxReportedKeys)
	}
	if unknown > maxReportedKeys {
		fmt.Fprintf(stderr, "... and %d more unknown keys\n", unknown-maxReportedKeys)
	}

	fmt.Fprintf(stdout, "ops=%d violations=%d\n", len(history), violations)
	if unknown > 0 {
		fmt.Fprintf(stdout, "unknown=%d\n", unknown)
	}
	switch {
	case violations > 0:
		return exitViolation
	case unknown > 0:
		return exitUnknown
	}
	return exitOK
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
