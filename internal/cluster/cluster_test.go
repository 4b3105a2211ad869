package cluster

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"distcache/internal/dc"
)

// TestServerForKeyAsPython: every key of the vectors (make constants, from distcache/cluster.py) lands on the
// storage server the Python side places it on.
func TestServerForKeyAsPython(t *testing.T) {
	raw, err := os.ReadFile("../wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Placement []struct {
			StorageRacks   int    `json:"storage_racks"`
			ServersPerRack int    `json:"servers_per_rack"`
			Digest         string `json:"digest"`
			Server         string `json:"server"`
		} `json:"placement"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Placement) < 8 {
		t.Fatalf("only %d placement vectors", len(v.Placement))
	}
	spread := map[string]bool{}
	for _, p := range v.Placement {
		c, err := Parse([]byte(`{"storage_racks": ` + strconv.Itoa(p.StorageRacks) + `, "servers_per_rack": ` +
			strconv.Itoa(p.ServersPerRack) + `}`))
		if err != nil {
			t.Fatal(err)
		}
		var d [dc.DigestLen]byte
		b, _ := hex.DecodeString(p.Digest)
		copy(d[:], b)
		if got := c.ServerForKey(d); got != p.Server {
			t.Errorf("%dx%d, digest %s: %s, Python says %s", p.StorageRacks, p.ServersPerRack, p.Digest, got, p.Server)
		}
		spread[p.Server] = true
	}
	if len(spread) < 3 {
		t.Errorf("the vectors name only %v: they cannot tell placements apart", spread)
	}
}

func TestBadClusterIsOneLine(t *testing.T) {
	for _, bad := range []string{`[]`, `{"spines": "2"}`, `{"nope": 1}`, `{"key_secret": "zz"}`, `{`} {
		_, err := Parse([]byte(bad))
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
