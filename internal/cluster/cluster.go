// Package cluster reads a deployment's cluster file as distcache/cluster.py writes it, and places keys as it
// does: which storage server owns a key (h1, rendezvous hashing over the servers' names) and the addressing
// plan of hosts and spines.
package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/crypto/blake2b"

	"distcache/internal/dc"
)

// Cluster is what the compiled programs (shim, gateway) read of the deployment's cluster file
// (distcache/cluster.py writes and checks the whole of it): the shape, the storage servers' rate and the key
// secret.
type Cluster struct {
	Spines         int     `json:"spines"`
	StorageRacks   int     `json:"storage_racks"`
	ServersPerRack int     `json:"servers_per_rack"`
	ServerRate     float64 `json:"server_rate"`
	ServerBurst    int     `json:"server_burst"`
	ServerQueue    float64 `json:"server_queue"`
	ClientRacks    int     `json:"client_racks"`
	ClientsPerRack int     `json:"clients_per_rack"`
	KeySecret      string  `json:"key_secret"`
	// Secret is the key secret's bytes (the public development secret for "")
	Secret []byte `json:"-"`
	names  []string
}

// Server is one storage server of the cluster (the addressing plan of distcache/cluster.py).
type Server struct {
	Name     string
	IP       string
	Rack     int
	LeafID   uint8   // its rack's leaf: on every coherence path of its keys
	SpineIDs []uint8 // every spine (a shim's coherence counts all: the mechanism may change while it serves)
	// whether the leaf may cache its keys under some mechanism (placement.possible_holders)
	LeafMayCache bool
}

// Load reads and checks a cluster file; its error says which file and what is wrong, in distcache's words.
func Load(path string) (*Cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, syscall.EISDIR) {
			return nil, fmt.Errorf("%s is a directory, not a cluster file", path)
		}
		return nil, fmt.Errorf("cannot read %s: %v", path, err)
	}
	c, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return c, nil
}

// Parse reads a cluster description: a JSON object of the fields of distcache/cluster.py, every
// number within the range it has there (internal/dc's tables, generated from it), said as it says it.
// The fields not read here are checked for their kind and range only: distcache's own tools
// check the rest of a file before any deployment starts.
func Parse(raw []byte) (*Cluster, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		var anyValue any
		if json.Unmarshal(raw, &anyValue) == nil {
			return nil, fmt.Errorf("a cluster description is a JSON object of fields, not %s", jsonKind(anyValue))
		}
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	var unknown []string
	for name := range fields {
		if !slices.Contains(dc.ClusterFields, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known := slices.Clone(dc.ClusterFields)
		slices.Sort(known)
		return nil, fmt.Errorf("unknown cluster field(s) %s; known: %s", pyList(unknown), pyList(known))
	}
	for _, ck := range dc.ClusterChecks {
		v, ok := fields[ck.Name]
		if !ok {
			continue
		}
		n, isNum := v.(json.Number)
		f, ferr := n.Float64()
		whole := isNum && ferr == nil && !strings.ContainsAny(n.String(), ".eE")
		inRange := isNum && ferr == nil && f >= ck.Lo && (math.IsNaN(ck.Hi) || f <= ck.Hi)
		if ck.Int && (!whole || !inRange) {
			return nil, fmt.Errorf("%s: expected an integer %s%s, got %s", ck.Name, bound(ck, "%d"), ck.Why, show(v))
		}
		if !ck.Int && !inRange {
			return nil, fmt.Errorf("%s: expected a number %s%s, got %s", ck.Name, bound(ck, "%g"), ck.Why, show(v))
		}
	}
	c := &Cluster{Spines: dc.DefaultSpines, StorageRacks: dc.DefaultStorageRacks,
		ServersPerRack: dc.DefaultServersPerRack, ServerRate: dc.DefaultServerRate,
		ServerBurst: dc.DefaultServerBurst, ServerQueue: dc.DefaultServerQueue, ClientRacks: dc.DefaultClientRacks,
		ClientsPerRack: dc.DefaultClientsPerRack}
	if err := json.Unmarshal(raw, c); err != nil { // every number read is checked above
		return nil, fmt.Errorf("not a cluster description: %v", err)
	}
	if c.KeySecret == "" {
		c.Secret = []byte(dc.DevKeySecret)
	} else if s, err := hex.DecodeString(c.KeySecret); err == nil && len(s) >= 16 && len(s) <= 64 {
		c.Secret = s
	} else {
		return nil, fmt.Errorf("key_secret: expected 32-128 hex digits (16-64 bytes; a deployment writes one), " +
			"or \"\" for the public development secret")
	}
	for r := 0; r < c.StorageRacks; r++ {
		for s := 0; s < c.ServersPerRack; s++ {
			c.names = append(c.names, fmt.Sprintf("r%ds%d", r, s))
		}
	}
	return c, nil
}

func bound(ck dc.ClusterCheck, verb string) string {
	if math.IsNaN(ck.Hi) {
		return ">= " + fmt.Sprintf(verb, num(ck.Lo, verb))
	}
	return fmt.Sprintf(verb+".."+verb, num(ck.Lo, verb), num(ck.Hi, verb))
}

func num(f float64, verb string) any {
	if verb == "%d" {
		return int64(f)
	}
	return f
}

// show is a value as the user wrote it in JSON (true, not True; "2" with its quotes), as Python's json.dumps.
func show(v any) string {
	if n, ok := v.(json.Number); ok {
		return n.String()
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(out)
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "list"
	case string:
		return "str"
	case bool:
		return "bool"
	case nil:
		return "NoneType"
	}
	return "float"
}

func pyList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = "'" + s + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// Server finds the storage server called name (r<rack>s<index>), or says which there are.
func (c *Cluster) Server(name string) (*Server, error) {
	var names []string
	for r := 0; r < c.StorageRacks; r++ {
		for s := 0; s < c.ServersPerRack; s++ {
			n := fmt.Sprintf("r%ds%d", r, s)
			if n != name {
				names = append(names, n)
				continue
			}
			srv := &Server{Name: n, IP: fmt.Sprintf("%s.%d.%d", dc.StorageRackNet, r, s+1), Rack: r,
				LeafID: uint8(dc.StorageLeafBase + r), LeafMayCache: dc.StorageLeafMayCache}
			for i := 0; dc.SpinesMayCache && i < c.Spines; i++ {
				srv.SpineIDs = append(srv.SpineIDs, uint8(dc.SpineBase+1+i))
			}
			return srv, nil
		}
	}
	return nil, fmt.Errorf("no storage server '%s' in the cluster (its servers: %s)", name, strings.Join(names, ", "))
}

// SpineAddress is where coherence packets for a spine go (they pass the storage leaf up and back).
func SpineAddress(id uint8) string { return fmt.Sprintf("%s.%d", dc.SpineNet, id) }

// ServerNames are the storage servers' names in global index order (rack-major): what h1 places keys over.
func (c *Cluster) ServerNames() []string { return c.names }

// ServerForKey is the name of the storage server that owns the key of digest: the server whose 64-bit BLAKE2b
// of the digest, keyed by its name, is highest (distcache/hashing.py's h1; ties go to the first listed).
func (c *Cluster) ServerForKey(digest [dc.DigestLen]byte) string {
	best, bestScore := 0, uint64(0)
	for i, name := range c.names {
		h, _ := blake2b.New(8, []byte(name)) // names are r<r>s<s>: within BLAKE2b's 64-byte key
		h.Write(digest[:])
		score := binary.BigEndian.Uint64(h.Sum(nil))
		if i == 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	return c.names[best]
}

// ClientAddress is the address of client host n of client rack r (c<r>h<n>).
func ClientAddress(r, n int) string { return fmt.Sprintf("%s.%d.%d", dc.ClientRackNet, r, n+1) }
