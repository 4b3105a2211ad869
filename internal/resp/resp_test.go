package resp

import (
	"errors"
	"testing"
)

// TestConversionsAreRedisOwn: each reply as a RESP2 and a RESP3 client reads it.
func TestConversionsAreRedisOwn(t *testing.T) {
	for _, tc := range []struct{ in, resp2, resp3 string }{
		{"+OK\r\n", "+OK\r\n", "+OK\r\n"},
		{"-ERR no\r\n", "-ERR no\r\n", "-ERR no\r\n"},
		{":-42\r\n", ":-42\r\n", ":-42\r\n"},
		{"$3\r\na\r\n\r\n", "$3\r\na\r\n\r\n", "$3\r\na\r\n\r\n"},
		{"$0\r\n\r\n", "$0\r\n\r\n", "$0\r\n\r\n"},
		{"$-1\r\n", "$-1\r\n", "_\r\n"},
		{"*-1\r\n", "*-1\r\n", "_\r\n"},
		{"_\r\n", "$-1\r\n", "_\r\n"},
		{"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "*2\r\n$1\r\na\r\n*1\r\n:1\r\n"},
		{"%1\r\n+k\r\n,1.5\r\n", "*2\r\n+k\r\n$3\r\n1.5\r\n", "%1\r\n+k\r\n,1.5\r\n"},
		{"~2\r\n#t\r\n#f\r\n", "*2\r\n:1\r\n:0\r\n", "~2\r\n#t\r\n#f\r\n"},
		{"=8\r\ntxt:hi\r\n\r\n", "$4\r\nhi\r\n\r\n", "=8\r\ntxt:hi\r\n\r\n"},
		{"|1\r\n+a\r\n+b\r\n:7\r\n", ":7\r\n", ":7\r\n"},
		{"(12345678901234567890\r\n", "$20\r\n12345678901234567890\r\n", "(12345678901234567890\r\n"},
	} {
		v, n, err := Parse([]byte(tc.in + "+next\r\n"))
		if err != nil || n != len(tc.in) {
			t.Fatalf("%q: took %d bytes of %d, %v", tc.in, n, len(tc.in), err)
		}
		for proto, want := range map[int]string{2: tc.resp2, 3: tc.resp3} {
			w := Writer{Proto: proto}
			w.Value(v)
			if string(w.Buf) != want {
				t.Errorf("%q to RESP%d: %q, want %q", tc.in, proto, w.Buf, want)
			}
		}
	}
}

func TestPartsOfAValueAreIncompleteAndGarbageIsAnError(t *testing.T) {
	full := "*3\r\n$5\r\nhello\r\n:1\r\n%1\r\n+a\r\n_\r\n"
	for i := 0; i < len(full); i++ {
		if _, _, err := Parse([]byte(full[:i])); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("%q: %v, want incomplete", full[:i], err)
		}
	}
	for _, bad := range []string{"?x\r\n", "$x\r\n", "$2\r\nabcd\r\n", ":1.5\r\n", "#x\r\n", "*-5\r\n"} {
		if _, _, err := Parse([]byte(bad)); err == nil || errors.Is(err, ErrIncomplete) {
			t.Errorf("%q: %v, want an error", bad, err)
		}
	}
	deep := ""
	for i := 0; i < MaxDepth+2; i++ {
		deep += "*1\r\n"
	}
	if _, _, err := Parse([]byte(deep + ":1\r\n")); err == nil {
		t.Error("nesting past MaxDepth was read")
	}
	// a length no bytes back: no allocation of it
	if _, _, err := Parse([]byte("*2000000000\r\n")); !errors.Is(err, ErrIncomplete) {
		t.Errorf("a huge array header: %v", err)
	}
}

func TestWriterProtocols(t *testing.T) {
	w2, w3 := Writer{Proto: 2}, Writer{Proto: 3}
	for _, w := range []*Writer{&w2, &w3} {
		w.MapLen(1)
		w.BulkString("k")
		w.Double(0.1)
		w.Nil()
		w.Error("ERR two\r\nlines")
	}
	if got := string(w2.Buf); got != "*2\r\n$1\r\nk\r\n$3\r\n0.1\r\n$-1\r\n-ERR two  lines\r\n" {
		t.Errorf("RESP2: %q", got)
	}
	if got := string(w3.Buf); got != "%1\r\n$1\r\nk\r\n,0.1\r\n_\r\n-ERR two  lines\r\n" {
		t.Errorf("RESP3: %q", got)
	}
}
