package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runHistory writes lines to a temporary history file, runs lincheck on it
// with the extra flags and returns the exit code, stdout and stderr.
func runHistory(t *testing.T, lines []string, flags ...string) (int, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"--history", path}, flags...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// op formats one history line; value and ret may be nil (JSON null).
func op(client int, key, kind string, value *string, call int64, ret *int64) string {
	v, r := "null", "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	if ret != nil {
		r = fmt.Sprint(*ret)
	}
	return fmt.Sprintf(`{"client": %d, "key": %q, "op": %q, "value": %s, "call": %d, "return": %s}`,
		client, key, kind, v, call, r)
}

// del formats one delete line; found is its status (true: OK, false:
// NOT_FOUND) and nil writes "found": null, as for a delete that never returned.
func del(client int, key string, found *bool, call int64, ret *int64) string {
	f, r := "null", "null"
	if found != nil {
		f = fmt.Sprint(*found)
	}
	if ret != nil {
		r = fmt.Sprint(*ret)
	}
	return fmt.Sprintf(`{"client": %d, "key": %q, "op": "delete", "found": %s, "call": %d, "return": %s}`,
		client, key, f, call, r)
}

// Delete statuses.
var (
	ok       = func() *bool { b := true; return &b }()
	notFound = func() *bool { b := false; return &b }()
)

func s(v string) *string { return &v }
func n(v int64) *int64   { return &v }

func expect(t *testing.T, lines []string, wantCode int, wantStdout string, flags ...string) string {
	t.Helper()
	code, stdout, stderr := runHistory(t, lines, flags...)
	if code != wantCode || stdout != wantStdout {
		t.Fatalf("exit %d stdout %q, want exit %d stdout %q (stderr %q)", code, stdout, wantCode, wantStdout, stderr)
	}
	return stderr
}

func TestConcurrentPutGetIsLinearizable(t *testing.T) {
	// The get overlaps the put, so it may see the old (absent) or the new
	// value; a later get overlapping a second put may see either too.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(100)),
		op(1, "x", "get", nil, 10, n(20)),
		op(2, "x", "get", s("1"), 50, n(60)),
		op(0, "x", "put", s("2"), 200, n(300)),
		op(1, "x", "get", s("1"), 210, n(220)),
		op(2, "x", "get", s("2"), 250, n(260)),
		op(1, "x", "get", s("2"), 310, n(320)),
	}, 0, "ops=7 violations=0\n")
}

func TestStaleReadAfterCompletedOverwriteIsViolation(t *testing.T) {
	// put 2 completed before the get began, so the get must not return 1.
	stderr := expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(0, "x", "put", s("2"), 20, n(30)),
		op(1, "x", "get", s("1"), 40, n(50)),
	}, 1, "ops=3 violations=1\n")
	if stderr != "violation key=x ops=3\n" {
		t.Fatalf("stderr %q", stderr)
	}
}

func TestTimedOutPutLaterReadIsLinearizable(t *testing.T) {
	// The client gave up on put 2, but it took effect later on: a read long
	// after the timeout sees it, and one before it still sees 1.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(0, "x", "put", s("2"), 20, nil),
		op(1, "x", "get", s("1"), 500, n(510)),
		op(1, "x", "get", s("2"), 1000, n(1010)),
	}, 0, "ops=4 violations=0\n")
}

func TestTimedOutPutNeverTakingEffectIsLinearizable(t *testing.T) {
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(0, "x", "put", s("2"), 20, nil),
		op(1, "x", "get", s("1"), 1000, n(1010)),
	}, 0, "ops=3 violations=0\n")
}

func TestTimedOutPutCannotBeUndone(t *testing.T) {
	// Unknown outcome is not "anything goes": once 2 was read, the put of 2
	// has happened, and nothing rewrote 1 afterwards.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(0, "x", "put", s("2"), 20, nil),
		op(1, "x", "get", s("2"), 100, n(110)),
		op(1, "x", "get", s("1"), 200, n(210)),
	}, 1, "ops=4 violations=1\n")
}

func TestNeverWrittenValueIsViolation(t *testing.T) {
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(1, "x", "get", s("ghost"), 5, n(15)),
	}, 1, "ops=2 violations=1\n")
}

func TestDeleteAndAbsent(t *testing.T) {
	expect(t, []string{
		op(0, "x", "get", nil, 0, n(5)),
		op(0, "x", "put", s(""), 10, n(20)),
		op(1, "x", "get", s(""), 30, n(40)), // empty string is a value, not absent
		del(0, "x", ok, 50, n(60)),
		op(1, "x", "get", nil, 70, n(80)),
	}, 0, "ops=5 violations=0\n")
	expect(t, []string{
		op(0, "x", "put", s("1"), 10, n(20)),
		del(0, "x", ok, 50, n(60)),
		op(1, "x", "get", s("1"), 70, n(80)),
	}, 1, "ops=3 violations=1\n")
	expect(t, []string{
		op(0, "x", "put", s(""), 10, n(20)),
		op(1, "x", "get", nil, 30, n(40)),
	}, 1, "ops=2 violations=1\n")
}

func TestDeleteStatusAfterPut(t *testing.T) {
	// The key was written before the delete began: it must answer OK.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(1, "x", ok, 20, n(30)),
	}, 0, "ops=2 violations=0\n")
	stderr := expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(1, "x", notFound, 20, n(30)),
	}, 1, "ops=2 violations=1\n")
	if stderr != "violation key=x ops=2\n" {
		t.Fatalf("stderr %q", stderr)
	}
}

func TestDeleteStatusOfAbsentKey(t *testing.T) {
	// Never written, or already deleted: NOT_FOUND, also for a second delete.
	expect(t, []string{
		del(0, "x", notFound, 0, n(10)),
		op(1, "x", "put", s("1"), 20, n(30)),
		del(0, "x", ok, 40, n(50)),
		del(1, "x", notFound, 60, n(70)),
	}, 0, "ops=4 violations=0\n")
	expect(t, []string{del(0, "x", ok, 0, n(10))}, 1, "ops=1 violations=1\n")
	expect(t, []string{
		op(1, "x", "put", s("1"), 0, n(10)),
		del(0, "x", ok, 20, n(30)),
		del(1, "x", ok, 40, n(50)), // the key was gone: this one must say NOT_FOUND
	}, 1, "ops=3 violations=1\n")
}

func TestConcurrentDeletesOnlyOneFindsTheKey(t *testing.T) {
	// Two overlapping deletes of a present key: one takes it, the other finds
	// nothing; both answering OK would need two puts.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(1, "x", notFound, 20, n(50)),
		del(2, "x", ok, 30, n(40)),
	}, 0, "ops=3 violations=0\n")
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(1, "x", ok, 20, n(50)),
		del(2, "x", ok, 30, n(40)),
	}, 1, "ops=3 violations=1\n")
	// A put overlapping the delete may come first: OK and NOT_FOUND both fit.
	for _, status := range []*bool{ok, notFound} {
		expect(t, []string{
			op(0, "x", "put", s("1"), 10, n(40)),
			del(1, "x", status, 20, n(30)),
		}, 0, "ops=2 violations=0\n")
	}
}

func TestRetriedDelete(t *testing.T) {
	// Client 0's delete was sent, lost its reply and was retried: the client
	// records it once, from its first call (10) to the reply it accepted
	// (100). Client 1's NOT_FOUND at [20,30] shows it took effect before 30.
	prefix := []string{
		op(2, "x", "put", s("a"), 0, n(5)),
		del(0, "x", ok, 10, n(100)),
		del(1, "x", notFound, 20, n(30)),
		op(2, "x", "put", s("b"), 40, n(50)),
		op(1, "x", "get", s("b"), 60, n(70)),
	}
	// The shim replays the first reply to the retry (shim/dedup.py): b stays.
	expect(t, append(prefix, op(1, "x", "get", s("b"), 110, n(120))), 0, "ops=6 violations=0\n")
	// A retry applied a second time deletes b, which no single delete explains.
	expect(t, append(prefix, op(1, "x", "get", nil, 110, n(120))), 1, "ops=6 violations=1\n")
	// A retry answered OK though the first copy found nothing (a replay that
	// forgot the status): no put precedes it, so OK is impossible.
	expect(t, []string{
		del(0, "x", ok, 10, n(100)),
		op(1, "x", "get", nil, 20, n(30)),
	}, 1, "ops=2 violations=1\n")
}

func TestTimedOutDelete(t *testing.T) {
	// No status: it may delete at any time after its call, or never.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(0, "x", nil, 20, nil),
		op(1, "x", "get", s("1"), 500, n(510)),
		op(1, "x", "get", nil, 1000, n(1010)),
		del(1, "x", notFound, 1100, n(1110)),
	}, 0, "ops=5 violations=0\n")
	// Once its effect was seen, the key stays deleted.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		del(0, "x", nil, 20, nil),
		del(1, "x", notFound, 100, n(110)),
		del(1, "x", ok, 200, n(210)),
	}, 1, "ops=4 violations=1\n")
	// A delete that answered OK needs the timed-out put to have happened
	// before it; a read of absent then a read of the value needs a second put.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, nil),
		del(1, "x", ok, 100, n(110)),
		op(1, "x", "get", nil, 200, n(210)),
	}, 0, "ops=3 violations=0\n")
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, nil),
		del(1, "x", ok, 100, n(110)),
		op(1, "x", "get", nil, 200, n(210)),
		op(1, "x", "get", s("1"), 300, n(310)),
	}, 1, "ops=4 violations=1\n")
}

func TestUnknownGetIsSkipped(t *testing.T) {
	// A get that never returned claims nothing, even an impossible value.
	expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(1, "x", "get", s("ghost"), 20, nil),
		op(1, "x", "get", nil, 30, nil),
	}, 0, "ops=1 violations=0\n")
}

func TestKeysAreIndependent(t *testing.T) {
	// Reads of y are not constrained by writes to x, and the bad key is named.
	stderr := expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(1, "y", "get", nil, 20, n(30)),
		op(1, "x", "get", s("1"), 40, n(50)),
		op(2, "bad key", "get", s("1"), 40, n(50)),
	}, 1, "ops=4 violations=1\n")
	if stderr != "violation key=\"bad key\" ops=1\n" {
		t.Fatalf("stderr %q", stderr)
	}
}

func TestAtMostTenViolatingKeysListed(t *testing.T) {
	var lines []string
	for i := 0; i < 12; i++ {
		lines = append(lines, op(i, fmt.Sprintf("k%02d", i), "get", s("ghost"), 0, n(1)))
	}
	stderr := expect(t, lines, 1, "ops=12 violations=12\n")
	if got := strings.Count(stderr, "violation key="); got != 10 {
		t.Fatalf("%d violation lines, want 10: %q", got, stderr)
	}
	if !strings.Contains(stderr, "and 2 more") {
		t.Fatalf("stderr %q", stderr)
	}
}

func TestTimeoutReportsUnknown(t *testing.T) {
	// A 1ns budget is spent before any key starts: every key is unknown.
	stderr := expect(t, []string{
		op(0, "x", "put", s("1"), 0, n(10)),
		op(0, "y", "put", s("1"), 0, n(10)),
	}, 3, "ops=2 violations=0\nunknown=2\n", "--timeout", "1ns")
	if !strings.Contains(stderr, "unknown key=x ops=1") {
		t.Fatalf("stderr %q", stderr)
	}
}

func TestEmptyHistory(t *testing.T) {
	expect(t, []string{"", "  "}, 0, "ops=0 violations=0\n")
}

func TestHTML(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.html")
	expect(t, []string{
		op(3, "x", "put", s("1"), 0, n(10)),
		op(7, "x", "put", s("2"), 20, nil),
		op(7, "y", "get", s("1"), 40, n(50)),
		del(3, "x", notFound, 60, n(70)),
		del(3, "y", nil, 80, nil),
	}, 1, "ops=5 violations=2\n", "--html", out)
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Descriptions are embedded as JSON strings (quotes and > escaped).
	for _, want := range []string{`put(x)=\"1\"`, `put(x)=\"2\" (timed out)`, `get(y) -\u003e \"1\"`, "client 7, line 3",
		`delete(x) -\u003e NOT_FOUND`, `delete(y) (timed out)`} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("HTML lacks %s", want)
		}
	}
}

func TestMalformedLines(t *testing.T) {
	good := op(0, "x", "put", s("1"), 0, n(10))
	for _, tc := range []struct{ line, want string }{
		{`{"client": 0, "key": "x", "op": "put"`, "line 3: unexpected end"},
		{`not json`, "line 3: invalid character"},
		{`{"key": "x", "op": "get", "value": null, "call": 0, "return": 1}`, `line 3: missing "client"`},
		{`{"client": 0, "op": "get", "value": null, "call": 0, "return": 1}`, `line 3: missing "key"`},
		{`{"client": 0, "key": "x", "op": "cas", "value": "1", "call": 0, "return": 1}`, `line 3: "op" must be`},
		{`{"client": 0, "key": "x", "op": "get", "value": null, "return": 1}`, `line 3: missing "call"`},
		{`{"client": 0, "key": "x", "op": "get", "value": null, "call": 0}`, `line 3: missing "return"`},
		{`{"client": 0, "key": "x", "op": "get", "call": 0, "return": 1}`, `line 3: get needs "value"`},
		{`{"client": 0, "key": "x", "op": "get", "value": 5, "call": 0, "return": 1}`, `line 3: "value" must be`},
		{`{"client": 0, "key": "x", "op": "put", "value": null, "call": 0, "return": 1}`, `line 3: put "value" must be a string`},
		{`{"client": 0, "key": "x", "op": "put", "value": "1", "call": 1.5, "return": 2}`, `line 3: json: cannot unmarshal`},
		{`{"client": 0, "key": "x", "op": "put", "value": "1", "call": 5, "return": 4}`, `line 3: "return" (4) is before "call" (5)`},
		{`{"client": 0, "key": "x", "op": "put", "value": "1", "call": 5, "return": "6"}`, `line 3: "return" must be`},
		{`{"client": 0, "key": "x", "op": "delete", "call": 0, "return": 1}`, `line 3: delete needs "found"`},
		{`{"client": 0, "key": "x", "op": "delete", "value": null, "found": null, "call": 0, "return": 1}`, `line 3: delete needs "found"`},
		{`{"client": 0, "key": "x", "op": "delete", "found": "OK", "call": 0, "return": 1}`, `line 3: "found" must be true or false`},
		{`{"client": 0, "key": "x", "op": "delete", "found": 1, "call": 0, "return": 1}`, `line 3: "found" must be true or false`},
		{`{"client": 0, "key": "x", "op": "delete", "found": false, "call": 0, "return": null}`, `line 3: delete with "return": null has no status`},
	} {
		code, stdout, stderr := runHistory(t, []string{good, "", tc.line, good})
		if code != exitBadInput || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d stdout %q stderr %q, want exit 2 and %q", tc.line, code, stdout, stderr, tc.want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	for _, args := range [][]string{{}, {"--history"}, {"--bogus"}, {"--history", "/nonexistent/h.jsonl"}} {
		stdout.Reset()
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != exitBadInput || stdout.Len() != 0 {
			t.Errorf("%v: exit %d stdout %q, want exit 2", args, code, stdout.String())
		}
	}
}

func TestRefusedWriteLinesAreSkipped(t *testing.T) {
	// a put answered ERROR wrote nothing: its line is kept for the staleness oracle and skipped here, so a
	// read of its value is a violation and a read of the earlier value is not
	refused := `{"client": 0, "key": "x", "op": "put", "value": "2", "call": 20, "return": 30, "error": true}`
	expect(t, []string{op(0, "x", "put", s("1"), 0, n(10)), refused, op(1, "x", "get", s("1"), 40, n(50))},
		0, "ops=2 violations=0\n")
	expect(t, []string{op(0, "x", "put", s("1"), 0, n(10)), refused, op(1, "x", "get", s("2"), 40, n(50))},
		1, "ops=2 violations=1\n")
	// a refused delete carries no status, and needs none
	refusedDelete := `{"client": 0, "key": "x", "op": "delete", "found": null, "call": 20, "return": 30, "error": true}`
	expect(t, []string{op(0, "x", "put", s("1"), 0, n(10)), refusedDelete, op(1, "x", "get", s("1"), 40, n(50))},
		0, "ops=2 violations=0\n")
}

// wrongType formats a line answered WRONGTYPE (an incr or hset that wrote nothing, a get of a hash).
func wrongType(client int, key, kind string, call, ret int64) string {
	return fmt.Sprintf(`{"client": %d, "key": %q, "op": %q, "value": null, "wrongtype": true, "call": %d, "return": %d}`,
		client, key, kind, call, ret)
}

func TestIncrementsAnswerOneMoreThanTheValueBefore(t *testing.T) {
	lines := []string{
		op(1, "n", "incr", s("1"), 0, n(10)),
		op(2, "n", "incr", s("2"), 5, n(20)), // overlaps the first: either order, answers 1 and 2
		op(3, "n", "get", s("2"), 30, n(40)),
		op(1, "n", "put", s("41"), 50, n(60)),
		op(2, "n", "incr", s("42"), 70, n(80)),
		del(3, "n", ok, 90, n(100)),
		op(1, "n", "incr", s("1"), 110, n(120)), // absent counts as 0
		op(2, "n", "incr", nil, 130, nil),       // unknown: applied or not
		op(3, "n", "get", s("2"), 200, n(210)),
	}
	if code, out, _ := runHistory(t, lines); code != exitOK || out != "ops=9 violations=0\n" {
		t.Fatalf("code=%d out=%q", code, out)
	}
}

func TestAnIncrementAppliedTwiceIsAViolation(t *testing.T) {
	// one INCR acknowledged once but applied twice: the next answers 3, though only two were made before it
	lines := []string{
		op(1, "n", "incr", s("1"), 0, n(10)),
		op(2, "n", "incr", s("3"), 20, n(30)),
	}
	if code, out, _ := runHistory(t, lines); code != exitViolation || out != "ops=2 violations=1\n" {
		t.Fatalf("code=%d out=%q", code, out)
	}
}

func TestAGetAfterAnHsetAnswersWrongType(t *testing.T) {
	good := []string{
		op(1, "k", "put", s("old"), 0, n(10)),
		wrongType(2, "k", "hset", 20, 30), // a string: HSET answers WRONGTYPE and writes nothing
		op(3, "k", "get", s("old"), 40, n(50)),
		del(1, "k", ok, 60, n(70)),
		op(2, "k", "hset", s("v1"), 80, n(90)),
		wrongType(3, "k", "get", 100, 110),
		wrongType(1, "k", "incr", 120, 130),
		op(2, "k", "put", s("new"), 140, n(150)), // SET replaces the hash
		op(3, "k", "get", s("new"), 160, n(170)),
	}
	if code, out, _ := runHistory(t, good); code != exitOK || out != "ops=9 violations=0\n" {
		t.Fatalf("code=%d out=%q", code, out)
	}
	// the old string read after the HSET over it was acknowledged (a stale cached copy)
	stale := []string{
		op(1, "k", "put", s("old"), 0, n(10)),
		del(1, "k", ok, 20, n(30)),
		op(2, "k", "hset", s("v1"), 40, n(50)),
		op(3, "k", "get", s("old"), 60, n(70)),
	}
	if code, out, _ := runHistory(t, stale); code != exitViolation || out != "ops=4 violations=1\n" {
		t.Fatalf("stale: code=%d out=%q", code, out)
	}
	// WRONGTYPE on a key no HSET made a hash
	if code, _, _ := runHistory(t, []string{op(1, "k", "put", s("a"), 0, n(10)), wrongType(2, "k", "get", 20, 30)}); code != exitViolation {
		t.Fatalf("wrongtype on a string: code=%d", code)
	}
}

func TestMalformedIncrAndWrongTypeLines(t *testing.T) {
	for _, line := range []string{
		op(1, "n", "incr", s("x"), 0, n(10)),
		op(1, "n", "incr", nil, 0, n(10)),
		`{"client": 1, "key": "k", "op": "get", "value": "v", "wrongtype": true, "call": 0, "return": 1}`,
	} {
		if code, _, errOut := runHistory(t, []string{line}); code != exitBadInput {
			t.Fatalf("%s: code=%d stderr=%q", line, code, errOut)
		}
	}
}
