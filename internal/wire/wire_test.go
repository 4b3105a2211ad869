package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"distcache/internal/dc"
)

// The shared vectors (internal/wire/testdata/vectors.json, written by make constants from distcache/wire.py):
// every message decodes to the fields Python encoded and encodes back to the same bytes; every malformed one
// is refused for the reason Python gives, with the same refusal.
type vector struct {
	Name, Hex, Digest, Key, Value, Reason, Refusal string
	Op, Status, Flags, Target                      int
	Seq                                            uint64
	SpineLoad                                      uint32 `json:"spine_load"`
	LeafLoad                                       uint32 `json:"leaf_load"`
	Args                                           []string
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type digestVector struct{ Key, Secret, Digest string }

type vectorFile struct {
	Messages, Malformed []vector
	Digests             []digestVector
}

func load(t *testing.T) vectorFile {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) == 0 || len(v.Malformed) == 0 || len(v.Digests) == 0 {
		t.Fatal("no vectors")
	}
	return v
}

func vectors(t *testing.T) (ok, bad []vector) {
	v := load(t)
	return v.Messages, v.Malformed
}

func TestMessagesDecodeAndEncodeAsPythonDoes(t *testing.T) {
	ok, _ := vectors(t)
	for _, v := range ok {
		data := unhex(t, v.Hex)
		m, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if int(m.Op) != v.Op || int(m.Status) != v.Status || int(m.Flags) != v.Flags || m.Seq != v.Seq ||
			int(m.Target) != v.Target || m.SpineLoad != v.SpineLoad || m.LeafLoad != v.LeafLoad {
			t.Errorf("%s: header fields %+v", v.Name, m)
		}
		if !bytes.Equal(m.Digest[:], unhex(t, v.Digest)) || !bytes.Equal(m.Key, unhex(t, v.Key)) ||
			!bytes.Equal(m.Value, unhex(t, v.Value)) || len(m.Args) != len(v.Args) {
			t.Errorf("%s: body %+v", v.Name, m)
		}
		for i, a := range v.Args {
			if !bytes.Equal(m.Args[i], unhex(t, a)) {
				t.Errorf("%s: argument %d is %q", v.Name, i, m.Args[i])
			}
		}
		inPlace, err := DecodeInPlace(append([]byte{}, data...))
		if err != nil || !bytes.Equal(inPlace.Key, m.Key) || !bytes.Equal(inPlace.Value, m.Value) ||
			len(inPlace.Args) != len(m.Args) || inPlace.Seq != m.Seq {
			t.Errorf("%s: decoded in place %+v (%v)", v.Name, inPlace, err)
		}
		again, err := m.Encode()
		if err != nil || !bytes.Equal(again, data) {
			t.Errorf("%s: encodes to %x, Python's is %x (%v)", v.Name, again, data, err)
		}
		if m.Size() != len(data) {
			t.Errorf("%s: Size %d, encoded %d", v.Name, m.Size(), len(data))
		}
	}
}

func TestMalformedMessagesAreRefusedForPythonsReason(t *testing.T) {
	_, bad := vectors(t)
	for _, v := range bad {
		data := unhex(t, v.Hex)
		_, err := Decode(data)
		werr, ok := err.(*Error)
		if !ok || werr.Reason != v.Reason {
			t.Errorf("%s: %v, Python's reason is %s", v.Name, err, v.Reason)
			continue
		}
		var got []byte
		if r := Refusal(data, werr); r != nil {
			got, _ = r.Encode()
		}
		if hex.EncodeToString(got) != v.Refusal {
			t.Errorf("%s: refusal %x, Python's %s", v.Name, got, v.Refusal)
		}
	}
}

func TestARedirectKeepsTheRequestsIdentityAndNothingElse(t *testing.T) {
	big := Message{Op: dc.OpGetReply, Key: []byte("k"), Seq: 9, Value: bytes.Repeat([]byte("x"), 5000), Target: 4}
	r := Redirect(&big)
	if r.Status != dc.StatusStream || r.Seq != 9 || string(r.Key) != "k" || r.Value != nil || r.Target != 4 {
		t.Fatalf("redirect %+v", r)
	}
}

func TestTheDigestIsKeyedBlake2bAsPythonsIs(t *testing.T) {
	reused := map[string]*Digester{}
	for _, v := range load(t).Digests {
		got := KeyDigest(unhex(t, v.Key), unhex(t, v.Secret))
		if hex.EncodeToString(got[:]) != v.Digest {
			t.Errorf("digest of %s under %s: %x, Python's %s", v.Key, v.Secret, got, v.Digest)
		}
		d := reused[v.Secret]
		if d == nil {
			d = NewDigester(unhex(t, v.Secret))
			reused[v.Secret] = d
		}
		for i := 0; i < 2; i++ { // a Digester used again gives the same digest
			if again := d.Sum(unhex(t, v.Key)); again != got {
				t.Errorf("a reused digester: %x, not %x", again, got)
			}
		}
	}
}

func FuzzDecodeNeverPanics(f *testing.F) {
	f.Add([]byte{dc.Version, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err == nil {
			if out, err := m.Encode(); err != nil || len(out) != len(data) {
				t.Fatalf("decoded but encodes to %x (%v)", out, err)
			}
		} else if _, ok := err.(*Error); !ok {
			t.Fatalf("not a wire.Error: %v", err)
		}
	})
}
