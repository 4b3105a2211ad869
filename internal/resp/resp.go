// Package resp reads and writes Redis' serialization protocol, RESP2 and RESP3, for the gateway: it writes
// every reply in the protocol its client chose (HELLO 2 or 3), and reads the RESP replies the shim's executor
// returns (RESP2, as a Lua script sees them) to write them again in the client's.
//
// The conversions are Redis' own (its networking.c addReply* family): a null is "$-1" (a bulk) or "*-1" (an
// array) in RESP2 and "_" in RESP3; a map is a flat array of keys and values in RESP2, a set an array, a
// double a bulk string, a boolean an integer (1 or 0), a verbatim string a bulk string of its text.
package resp

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Kinds of value, by their RESP type byte.
const (
	Status    = '+'
	Err       = '-'
	Int       = ':'
	Bulk      = '$'
	Array     = '*'
	Null      = '_'
	Map       = '%'
	Set       = '~'
	Double    = ','
	Bool      = '#'
	Verbatim  = '='
	BigNumber = '('
	Attribute = '|'
	Push      = '>'
	BlobError = '!'
)

// Value is one parsed reply. Str holds a string's bytes (a status, an error, a bulk, a double's or big
// number's text, a verbatim string's text after its format), Int an integer or a boolean (1/0), Elems an
// aggregate's elements (a map's keys and values in turn); NullArray marks RESP2's "*-1" (Kind Null).
type Value struct {
	Kind      byte
	Str       []byte
	Int       int64
	Elems     []Value
	NullArray bool
	Format    string // a verbatim string's (txt, mkd)
}

// ErrIncomplete: the bytes end before the value does.
var ErrIncomplete = errors.New("resp: incomplete value")

// MaxDepth bounds how deeply aggregates may nest in what Parse reads.
const MaxDepth = 128

// Parse reads one value from data, and how many bytes it took.
func Parse(data []byte) (Value, int, error) { return parse(data, 0) }

func line(data []byte) ([]byte, int, error) {
	i := bytes.Index(data, []byte("\r\n"))
	if i < 0 {
		return nil, 0, ErrIncomplete
	}
	return data[:i], i + 2, nil
}

func parse(data []byte, depth int) (Value, int, error) {
	if depth > MaxDepth {
		return Value{}, 0, fmt.Errorf("resp: aggregates nested deeper than %d", MaxDepth)
	}
	if len(data) == 0 {
		return Value{}, 0, ErrIncomplete
	}
	kind := data[0]
	body, n, err := line(data[1:])
	if err != nil {
		return Value{}, 0, err
	}
	n++ // the type byte
	v := Value{Kind: kind}
	switch kind {
	case Status, Err, Double, BigNumber:
		v.Str = body
		return v, n, nil
	case Int:
		v.Int, err = strconv.ParseInt(string(body), 10, 64)
		return v, n, err
	case Bool:
		if len(body) != 1 || (body[0] != 't' && body[0] != 'f') {
			return v, 0, fmt.Errorf("resp: boolean %q", body)
		}
		if body[0] == 't' {
			v.Int = 1
		}
		return v, n, nil
	case Null:
		return v, n, nil
	case Bulk, Verbatim, BlobError:
		size, err := strconv.Atoi(string(body))
		if err != nil || size < -1 {
			return v, 0, fmt.Errorf("resp: bulk length %q", body)
		}
		if size == -1 {
			return Value{Kind: Null}, n, nil
		}
		if len(data) < n+size+2 {
			return v, 0, ErrIncomplete
		}
		if data[n+size] != '\r' || data[n+size+1] != '\n' {
			return v, 0, errors.New("resp: a bulk string does not end with CRLF")
		}
		v.Str = data[n : n+size]
		if kind == Verbatim {
			if len(v.Str) < 4 || v.Str[3] != ':' {
				return v, 0, errors.New("resp: a verbatim string without its format")
			}
			v.Format, v.Str = string(v.Str[:3]), v.Str[4:]
		}
		return v, n + size + 2, nil
	case Array, Map, Set, Attribute, Push:
		count, err := strconv.Atoi(string(body))
		if err != nil || count < -1 {
			return v, 0, fmt.Errorf("resp: aggregate length %q", body)
		}
		if count == -1 {
			return Value{Kind: Null, NullArray: true}, n, nil
		}
		if kind == Map || kind == Attribute {
			count *= 2
		}
		if count > len(data) { // each element takes at least 3 bytes: no allocation past what was sent
			return v, 0, ErrIncomplete
		}
		v.Elems = make([]Value, 0, count)
		for i := 0; i < count; i++ {
			e, k, err := parse(data[n:], depth+1)
			if err != nil {
				return v, 0, err
			}
			v.Elems = append(v.Elems, e)
			n += k
		}
		if kind == Attribute { // metadata about the next value: skipped, as a client that ignores it does
			next, k, err := parse(data[n:], depth)
			return next, n + k, err
		}
		return v, n, nil
	}
	return v, 0, fmt.Errorf("resp: unknown type byte %q", kind)
}

// Writer builds replies in one protocol (2 or 3).
type Writer struct {
	Buf   []byte
	Proto int
}

func (w *Writer) head(kind byte, n int64) {
	w.Buf = append(w.Buf, kind)
	w.Buf = strconv.AppendInt(w.Buf, n, 10)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Status writes a simple string (+OK).
func (w *Writer) Status(s string) {
	w.Buf = append(w.Buf, '+')
	w.Buf = append(w.Buf, s...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Error writes an error reply; line breaks in msg become spaces (a RESP error is one line), as Redis does.
func (w *Writer) Error(msg string) {
	w.Buf = append(w.Buf, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.Buf = append(w.Buf, c)
	}
	w.Buf = append(w.Buf, '\r', '\n')
}

// Int writes an integer.
func (w *Writer) Int(n int64) { w.head(Int, n) }

// Bulk writes a bulk string.
func (w *Writer) Bulk(b []byte) {
	w.head(Bulk, int64(len(b)))
	w.Buf = append(w.Buf, b...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// BulkString writes a bulk string.
func (w *Writer) BulkString(s string) {
	w.head(Bulk, int64(len(s)))
	w.Buf = append(w.Buf, s...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Nil writes a missing string: "$-1" in RESP2, "_" in RESP3.
func (w *Writer) Nil() {
	if w.Proto == 3 {
		w.Buf = append(w.Buf, "_\r\n"...)
		return
	}
	w.Buf = append(w.Buf, "$-1\r\n"...)
}

// NilArray writes a missing array: "*-1" in RESP2, "_" in RESP3.
func (w *Writer) NilArray() {
	if w.Proto == 3 {
		w.Buf = append(w.Buf, "_\r\n"...)
		return
	}
	w.Buf = append(w.Buf, "*-1\r\n"...)
}

// ArrayLen starts an array of n elements.
func (w *Writer) ArrayLen(n int) { w.head(Array, int64(n)) }

// MapLen starts a map of n pairs: "%n" in RESP3, an array of 2n in RESP2.
func (w *Writer) MapLen(n int) {
	if w.Proto == 3 {
		w.head(Map, int64(n))
		return
	}
	w.head(Array, int64(2*n))
}

// SetLen starts a set of n elements ("~n" in RESP3, an array in RESP2).
func (w *Writer) SetLen(n int) {
	if w.Proto == 3 {
		w.head(Set, int64(n))
		return
	}
	w.head(Array, int64(n))
}

// Double writes a double: ",d" in RESP3, a bulk string in RESP2; its shortest text that reads back the same.
func (w *Writer) Double(d float64) {
	var text string
	switch {
	case math.IsInf(d, 1):
		text = "inf"
	case math.IsInf(d, -1):
		text = "-inf"
	default:
		text = strconv.FormatFloat(d, 'g', -1, 64)
	}
	if w.Proto == 3 {
		w.Buf = append(w.Buf, ',')
		w.Buf = append(w.Buf, text...)
		w.Buf = append(w.Buf, '\r', '\n')
		return
	}
	w.BulkString(text)
}

// Bool writes a boolean: "#t"/"#f" in RESP3, 1 or 0 in RESP2.
func (w *Writer) Bool(b bool) {
	if w.Proto == 3 {
		if b {
			w.Buf = append(w.Buf, "#t\r\n"...)
		} else {
			w.Buf = append(w.Buf, "#f\r\n"...)
		}
		return
	}
	if b {
		w.Int(1)
	} else {
		w.Int(0)
	}
}

// Verbatim writes text ("=" with its format in RESP3, a bulk string in RESP2), as INFO's reply is.
func (w *Writer) Verbatim(format, text string) {
	if w.Proto == 3 {
		w.head(Verbatim, int64(len(text)+4))
		w.Buf = append(w.Buf, format...)
		w.Buf = append(w.Buf, ':')
		w.Buf = append(w.Buf, text...)
		w.Buf = append(w.Buf, '\r', '\n')
		return
	}
	w.BulkString(text)
}

// Raw appends bytes already encoded in the writer's protocol.
func (w *Writer) Raw(b []byte) { w.Buf = append(w.Buf, b...) }

// Value writes v, converted to the writer's protocol.
func (w *Writer) Value(v Value) {
	switch v.Kind {
	case Status:
		w.Status(string(v.Str))
	case Err, BlobError:
		w.Error(string(v.Str))
	case Int:
		w.Int(v.Int)
	case Bulk:
		w.Bulk(v.Str)
	case Null:
		if v.NullArray {
			w.NilArray()
		} else {
			w.Nil()
		}
	case Double, BigNumber:
		if w.Proto == 3 {
			w.Buf = append(w.Buf, v.Kind)
			w.Buf = append(w.Buf, v.Str...)
			w.Buf = append(w.Buf, '\r', '\n')
		} else {
			w.Bulk(v.Str)
		}
	case Bool:
		w.Bool(v.Int == 1)
	case Verbatim:
		w.Verbatim(v.Format, string(v.Str))
	case Map:
		w.MapLen(len(v.Elems) / 2)
		for _, e := range v.Elems {
			w.Value(e)
		}
	case Set:
		w.SetLen(len(v.Elems))
		for _, e := range v.Elems {
			w.Value(e)
		}
	case Array, Push:
		w.ArrayLen(len(v.Elems))
		for _, e := range v.Elems {
			w.Value(e)
		}
	}
}
