// Package wire is the DistCache message codec (protocol version 2) for the compiled parts: the Go twin of
// distcache/wire.py, following the same field table (internal/dc, generated from it) and held to it by
// the shared vectors of tests/unit/test_go_wire.py.
//
// A message is the 52-byte header, then chunks | key | args | raw value: a value up to MaxCacheable bytes
// travels as zero-padded 16-byte chunks right behind the header (what a switch parses), a longer one as raw
// bytes at the end; an EXEC carries its command in the argument block.
package wire

import (
	"encoding/binary"
	"fmt"
	"hash"

	"golang.org/x/crypto/blake2b"

	"distcache/internal/dc"
)

// Message is one DistCache message. Key and Value are the user's bytes exactly; Digest is the key's keyed
// digest (the sender's to set, the shim's to check); Args a command's name and arguments (EXEC only).
type Message struct {
	Op        dc.Op
	Flags     uint8
	Status    dc.Status
	Seq       uint64
	Digest    [dc.DigestLen]byte
	Target    uint8
	ServedBy  uint8
	SpineID   uint8
	LeafID    uint8
	SpineLoad uint32
	LeafLoad  uint32
	Key       []byte
	Value     []byte
	Args      [][]byte
}

// Error is a byte string that is no well-formed message; Reason is the short stable token the drop
// counters use (short, version, op, chunks, length, too_large, args, key, frame).
type Error struct {
	Reason string
	Detail string
}

func (e *Error) Error() string {
	return fmt.Sprintf("malformed DistCache message (%s): %s", e.Reason, e.Detail)
}

func errorf(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// IsRequest says whether op is one a client sends to a storage server.
func IsRequest(op dc.Op) bool {
	return op == dc.OpGet || op == dc.OpPut || op == dc.OpDelete || op == dc.OpExec
}

// ReplyOp is the code answering request op (GET -> GET_REPLY).
func ReplyOp(op dc.Op) dc.Op { return op | 0x80 }

func knownOp(op dc.Op) bool        { return op.String() != fmt.Sprintf("Op(%d)", uint8(op)) }
func knownStatus(s dc.Status) bool { return s.String() != fmt.Sprintf("Status(%d)", uint8(s)) }

// ChunksFor is the number of 16-byte chunks a value of vlen bytes travels in (0: raw, never cached).
func ChunksFor(vlen int) int {
	if vlen > dc.MaxCacheable {
		return 0
	}
	return (vlen + dc.ChunkLen - 1) / dc.ChunkLen
}

// Reply is the reply a server sends for this request: same key, digest and seq; a read's reply echoes its
// target (the cache the client rack chose, which missed).
func (m *Message) Reply(status dc.Status, value []byte) Message {
	r := Message{Op: ReplyOp(m.Op), Status: status, Seq: m.Seq, Digest: m.Digest, Key: m.Key, Value: value}
	if m.Op == dc.OpGet {
		r.Target = m.Target
	}
	return r
}

// ArgsLen is the size of the argument block of args (0 for none).
func ArgsLen(args [][]byte) int {
	if len(args) == 0 {
		return 0
	}
	n := 4
	for _, a := range args {
		n += 4 + len(a)
	}
	return n
}

// Size is the encoded length of m.
func (m *Message) Size() int {
	n := dc.HeaderLen + len(m.Key) + ArgsLen(m.Args)
	if c := ChunksFor(len(m.Value)); c > 0 {
		return n + c*dc.ChunkLen
	}
	return n + len(m.Value)
}

// Append encodes m onto dst; an Error for what cannot travel (a key or value past its limit).
func (m *Message) Append(dst []byte) ([]byte, error) {
	if len(m.Key) > dc.MaxKey {
		return dst, errorf("key", "key of %d bytes exceeds %d", len(m.Key), dc.MaxKey)
	}
	if len(m.Value) > dc.MaxValue {
		return dst, errorf("too_large", "value of %d bytes exceeds %d", len(m.Value), dc.MaxValue)
	}
	if len(m.Args) > dc.MaxArgs {
		return dst, errorf("args", "%d arguments, at most %d", len(m.Args), dc.MaxArgs)
	}
	n := ChunksFor(len(m.Value))
	var h [dc.HeaderLen]byte
	h[dc.OffVersion] = dc.Version
	h[dc.OffOp] = uint8(m.Op)
	h[dc.OffFlags] = m.Flags
	h[dc.OffStatus] = uint8(m.Status)
	binary.BigEndian.PutUint64(h[dc.OffSeq:], m.Seq)
	copy(h[dc.OffDigest:], m.Digest[:])
	h[dc.OffTarget], h[dc.OffServedBy], h[dc.OffSpineId], h[dc.OffLeafId] = m.Target, m.ServedBy, m.SpineID, m.LeafID
	binary.BigEndian.PutUint32(h[dc.OffSpineLoad:], m.SpineLoad)
	binary.BigEndian.PutUint32(h[dc.OffLeafLoad:], m.LeafLoad)
	binary.BigEndian.PutUint32(h[dc.OffVlen:], uint32(len(m.Value)))
	binary.BigEndian.PutUint32(h[dc.OffAlen:], uint32(ArgsLen(m.Args)))
	binary.BigEndian.PutUint16(h[dc.OffKlen:], uint16(len(m.Key)))
	h[dc.OffNchunks] = uint8(n)
	dst = append(dst, h[:]...)
	if n > 0 {
		dst = append(dst, m.Value...)
		for pad := n*dc.ChunkLen - len(m.Value); pad > 0; pad-- {
			dst = append(dst, 0)
		}
	}
	dst = append(dst, m.Key...)
	if len(m.Args) > 0 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Args)))
		for _, a := range m.Args {
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(a)))
			dst = append(dst, a...)
		}
	}
	if n == 0 {
		dst = append(dst, m.Value...)
	}
	return dst, nil
}

// Encode is Append onto a buffer of its own.
func (m *Message) Encode() ([]byte, error) { return m.Append(make([]byte, 0, m.Size())) }

// Decode parses one message; its Key, Value and Args are copies (data may be reused at once).
func Decode(data []byte) (*Message, error) { return decode(data, true) }

// DecodeInPlace is Decode for data its caller never changes or reuses (a stream frame read for it): the
// message's Key, Value and Args are data's own bytes, not copies (a value of hundreds of MB is not copied).
func DecodeInPlace(data []byte) (*Message, error) { return decode(data, false) }

func decode(data []byte, copied bool) (*Message, error) {
	if len(data) < 1 {
		return nil, errorf("short", "an empty message")
	}
	if data[0] != dc.Version {
		return nil, errorf("version", "protocol version %d, this peer speaks version %d", data[0], dc.Version)
	}
	if len(data) < dc.HeaderLen {
		return nil, errorf("short", "%d bytes, the header needs %d", len(data), dc.HeaderLen)
	}
	m := &Message{
		Op: dc.Op(data[dc.OffOp]), Flags: data[dc.OffFlags], Status: dc.Status(data[dc.OffStatus]),
		Seq: binary.BigEndian.Uint64(data[dc.OffSeq:]), Target: data[dc.OffTarget],
		ServedBy: data[dc.OffServedBy], SpineID: data[dc.OffSpineId], LeafID: data[dc.OffLeafId],
		SpineLoad: binary.BigEndian.Uint32(data[dc.OffSpineLoad:]),
		LeafLoad:  binary.BigEndian.Uint32(data[dc.OffLeafLoad:]),
	}
	copy(m.Digest[:], data[dc.OffDigest:dc.OffDigest+dc.DigestLen])
	if !knownOp(m.Op) || !knownStatus(m.Status) {
		return nil, errorf("op", "unknown op 0x%02x or status %d", uint8(m.Op), uint8(m.Status))
	}
	vlen := int(binary.BigEndian.Uint32(data[dc.OffVlen:]))
	alen := int(binary.BigEndian.Uint32(data[dc.OffAlen:]))
	klen := int(binary.BigEndian.Uint16(data[dc.OffKlen:]))
	nchunks := int(data[dc.OffNchunks])
	if vlen > dc.MaxValue {
		return nil, errorf("too_large", "value length %d exceeds %d", vlen, dc.MaxValue)
	}
	if nchunks > dc.MaxChunks || nchunks != ChunksFor(vlen) {
		return nil, errorf("chunks", "nchunks=%d does not fit vlen=%d", nchunks, vlen)
	}
	chunkBytes, raw := nchunks*dc.ChunkLen, 0
	if nchunks == 0 {
		raw = vlen
	}
	if len(data) != dc.HeaderLen+chunkBytes+klen+alen+raw {
		return nil, errorf("length", "%d body bytes; the header says %d of chunks, a %d-byte key, %d of arguments "+
			"and %d of raw value", len(data)-dc.HeaderLen, chunkBytes, klen, alen, raw)
	}
	at := dc.HeaderLen + chunkBytes
	valueAt := at + klen + alen // a raw value's place; a cacheable one's is right behind the header
	if nchunks > 0 {
		valueAt = dc.HeaderLen
	}
	if copied { // the key and the value in one copy of their own (data may be reused at once)
		own := make([]byte, klen+vlen)
		m.Key, m.Value = own[:klen:klen], own[klen:]
		copy(m.Key, data[at:at+klen])
		copy(m.Value, data[valueAt:valueAt+vlen])
	} else {
		m.Key, m.Value = data[at:at+klen:at+klen], data[valueAt:valueAt+vlen:valueAt+vlen]
	}
	args, err := DecodeArgs(data[at+klen : at+klen+alen])
	if err != nil {
		return nil, err
	}
	if m.Op != dc.OpExec && len(args) > 0 {
		return nil, errorf("args", "%s carries no arguments", m.Op)
	}
	m.Args = args
	return m, nil
}

// DecodeArgs reads an argument block: the count, then each argument's length and bytes (u32 each).
func DecodeArgs(block []byte) ([][]byte, error) {
	if len(block) == 0 {
		return nil, nil
	}
	if len(block) < 4 {
		return nil, errorf("args", "an argument block of %d bytes has no count", len(block))
	}
	count := binary.BigEndian.Uint32(block)
	if count > dc.MaxArgs {
		return nil, errorf("args", "%d arguments, at most %d", count, dc.MaxArgs)
	}
	out, at := make([][]byte, 0, count), 4
	for i := 0; i < int(count); i++ {
		if at+4 > len(block) {
			return nil, errorf("args", "argument %d of %d has no length: the block ends at %d bytes", i, count, len(block))
		}
		n := int(binary.BigEndian.Uint32(block[at:]))
		at += 4
		if n > len(block)-at {
			return nil, errorf("args", "argument %d says %d bytes, %d are left", i, n, len(block)-at)
		}
		out = append(out, append([]byte{}, block[at:at+n]...))
		at += n
	}
	if at != len(block) {
		return nil, errorf("args", "%d bytes after the %d arguments", len(block)-at, count)
	}
	return out, nil
}

// Header is what a message's first HeaderLen bytes say, read without the rest (a frame refused unread).
type Header struct {
	Op     dc.Op
	Seq    uint64
	Digest [dc.DigestLen]byte
}

// ReadHeader reads the header of a request of this version, or says why it is none: a reason of the drop
// counters (short, version, op) for what is no request of this version.
func ReadHeader(data []byte) (Header, string) {
	if len(data) < dc.HeaderLen {
		return Header{}, "short"
	}
	if data[dc.OffVersion] != dc.Version {
		return Header{}, "version"
	}
	h := Header{Op: dc.Op(data[dc.OffOp]), Seq: binary.BigEndian.Uint64(data[dc.OffSeq:])}
	copy(h.Digest[:], data[dc.OffDigest:dc.OffDigest+dc.DigestLen])
	if !knownOp(h.Op) {
		return h, "op"
	}
	return h, ""
}

// Refusal is the reply a server owes the sender of data, which did not decode (err), when its header still
// reads as one of this version's requests: the request's reply op, digest and seq, TOO_LARGE for a value
// over the limit and BAD_REQUEST for anything else. Nil for what is no request (dropped and counted only).
func Refusal(data []byte, err *Error) *Message {
	h, bad := ReadHeader(data)
	if bad != "" || !IsRequest(h.Op) {
		return nil
	}
	status := dc.StatusBadRequest
	if err.Reason == "too_large" {
		status = dc.StatusTooLarge
	}
	return &Message{Op: ReplyOp(h.Op), Digest: h.Digest, Seq: h.Seq, Status: status}
}

// Redirect is the datagram a reply too large for one is sent as instead: its header and key with status
// STREAM and nothing else, which tells the client to ask again on the stream path with the same request.
func Redirect(reply *Message) Message {
	return Message{Op: reply.Op, Key: reply.Key, Digest: reply.Digest, Seq: reply.Seq, Status: dc.StatusStream,
		Flags: reply.Flags, Target: reply.Target}
}

// KeyDigest is the 16-byte digest switches index a key by: BLAKE2b-128 of the key, keyed by the deployment's
// secret (wire.key_digest).
func KeyDigest(key, secret []byte) [dc.DigestLen]byte { return NewDigester(secret).Sum(key) }

// Digester computes KeyDigest under one secret, reusing its keyed hash (one goroutine at a time).
type Digester struct{ h hash.Hash }

// NewDigester is a Digester for secret (16-64 bytes: a programming error otherwise, as the cluster file's
// checks refuse any other).
func NewDigester(secret []byte) *Digester {
	h, err := blake2b.New(dc.DigestLen, secret)
	if err != nil {
		panic(fmt.Sprintf("a key secret is 16-64 bytes, not %d", len(secret)))
	}
	return &Digester{h}
}

// Sum is key's digest.
func (d *Digester) Sum(key []byte) [dc.DigestLen]byte {
	d.h.Reset() // back to the keyed initial state
	d.h.Write(key)
	var out [dc.DigestLen]byte
	d.h.Sum(out[:0])
	return out
}
