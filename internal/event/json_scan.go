package event

import (
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

// The JSON scanning every reader of JSON in the product shares: splitting
// an object into its members and an array into its elements without
// decoding the values, decoding one string exactly as encoding/json does,
// and under them the tokens (scanString and the others below), which the
// checker (CheckJSON) and decodeFast read JSON with too. The ingest and
// decision APIs split their request bodies with it, the
// counterparty_fingerprint processor its messages, and decodeFast decodes a
// record's escaped strings as Unquote does.

// Member is one member of a JSON object: its key (unescaped) and its value's
// bytes, slices of the object's bytes, not copies. Read is the caller's to
// mark the members it has read (the ingest API names the others as unknown
// fields).
type Member struct {
	Key   []byte
	Value []byte
	Read  bool
}

// AppendMembers appends the members of the JSON object raw to dst, in
// order (a key named twice appears twice): false when raw is not one
// object. The values are not decoded, only delimited: raw is expected to
// be JSON that CheckJSON accepted, or to be refused as a whole when not.
func AppendMembers(dst []Member, raw []byte) ([]Member, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return dst, skipSpace(raw, i+1) == len(raw)
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return nil, false
		}
		end, flags, ok := scanString(raw, i)
		if !ok {
			return nil, false
		}
		key := raw[i+1 : end-1 : end-1]
		if flags&strEscaped != 0 {
			k, ok := Unquote(raw[i:end])
			if !ok {
				return nil, false
			}
			key = []byte(k)
		}
		i = skipSpace(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		vend := SkipValue(raw, i)
		if vend < 0 {
			return nil, false
		}
		dst = append(dst, Member{Key: key, Value: raw[i:vend:vend]})
		next, last, ok := afterMember(raw, vend, '}')
		switch {
		case !ok:
			return nil, false
		case last:
			return dst, skipSpace(raw, next) == len(raw)
		}
		i = next
	}
}

// SplitArray splits a JSON array (JSON already checked) into its elements,
// slices of arr; false when arr is not an array.
func SplitArray(arr []byte) ([][]byte, bool) {
	if len(arr) < 2 || arr[0] != '[' {
		return nil, false
	}
	raws := make([][]byte, 0, 64)
	i := skipSpace(arr, 1)
	if arr[i] == ']' {
		return raws, true
	}
	for {
		end := SkipValue(arr, i)
		if end < 0 {
			return nil, false
		}
		raws = append(raws, arr[i:end:end])
		next, last, ok := afterMember(arr, end, ']')
		switch {
		case !ok:
			return nil, false
		case last:
			return raws, true
		}
		i = next
	}
}

// afterMember reads what follows a member ending at b[i]: ',' and the space
// after it (next is the next member's start) or closing (last: next is
// after it); ok is false for anything else.
func afterMember(b []byte, i int, closing byte) (next int, last, ok bool) {
	i = skipSpace(b, i)
	if i >= len(b) {
		return i, false, false
	}
	switch b[i] {
	case ',':
		return skipSpace(b, i+1), false, true
	case closing:
		return i + 1, true, true
	}
	return i, false, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// The tokens of JSON, read in one place for every reader of JSON in this
// package: the splitter above, the checker (CheckJSON, jsonb.go) and the
// fast decoder (decode_fast.go). Each takes the bytes and the offset of the
// token's first byte, and on a fault returns the offset of the byte at
// fault (len(b) when the bytes end early), which the checker reports.

// strFlags says what a string's content holds beyond plain ASCII text.
type strFlags uint8

const (
	strEscaped     strFlags = 1 << iota // a backslash escape
	strBeyondASCII                      // a byte of 0x80 or above (maybe not UTF-8)
	strDEL                              // 0x7f, which CheckText refuses
)

// scanString reads the string whose opening quote is b[i]: end is after
// its closing quote. Its escapes are checked against JSON's grammar and a
// control character is refused; its UTF-8 is not checked (flags say
// whether there is anything beyond ASCII to check).
//
// Plain ASCII text (plainASCII) is passed byte by byte for a short run
// (keys, codes, amounts: most strings), then eight bytes at a time while
// none is special: most bytes of a body or a record are long plain strings
// (ciphertext, fingerprints, names), which a byte loop alone made a quarter
// of the decoding. One function, not two: a second call per string cost
// the decoder a tenth.
func scanString(b []byte, i int) (end int, flags strFlags, ok bool) {
	j := i + 1
	for {
		for k := min(len(b), j+16); j < k && plainASCII[b[j]]; {
			j++
		}
		if j < len(b) && plainASCII[b[j]] {
			for j+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[j:])) {
				j += 8
			}
			for j < len(b) && plainASCII[b[j]] {
				j++
			}
		}
		if j >= len(b) {
			return len(b), flags, false
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, flags, true
		case c == '\\':
			flags |= strEscaped
			if j+1 >= len(b) {
				return len(b), flags, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := hex4(b, j+2); !ok {
					return j, flags, false
				}
				j += 6
			default:
				return j, flags, false
			}
		case c < 0x20:
			return j, flags, false
		case c == 0x7f:
			flags |= strDEL
			j++
		default:
			flags |= strBeyondASCII
			j++
		}
	}
}

// plainASCII marks the bytes a JSON string holds as they are and that need
// no further look: ASCII from the space to '~' but the quote and the
// backslash.
var plainASCII = func() (t [256]bool) {
	for c := ' '; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// special8 reports whether any of x's eight bytes is '"', '\\', below 0x20,
// 0x7f or above it. (v - ones) &^ v & highs is nonzero exactly when one of
// v's bytes is 0 (a borrow may mark more bytes, never fewer: existence is
// exact); x itself is tested that way for bytes below 0x20 and beyond 0x7f.
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, bs, del := x^('"'*ones), x^('\\'*ones), x^(0x7f*ones)
	return ((q-ones)&^q|(bs-ones)&^bs|(del-ones)&^del|(x-0x20*ones)&^x|x)&highs != 0
}

// scanNumber reads the number at b[i]
// (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?): end is after it.
func scanNumber(b []byte, i int) (end int, ok bool) {
	j := i
	digits := func() int {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case digits() == 0:
		return j, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if digits() == 0 {
			return j, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return j, false
		}
	}
	return j, true
}

// scanLiteral reads lit (true, false, null; the decoder's "1" too) at
// b[i]: end is after it; on a fault, the first byte that differs.
func scanLiteral(b []byte, i int, lit string) (end int, ok bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	for k := 0; k < len(lit) && i < len(b) && b[i] == lit[k]; k++ {
		i++
	}
	return i, false
}

// endsToken reports whether a number or literal ending at b[i] is followed
// by what may follow a value (space, a separator, a closing bracket or the
// end), so that 1x or truex is not read as a token.
func endsToken(b []byte, i int) bool {
	if i >= len(b) {
		return true
	}
	switch b[i] {
	case ' ', '\t', '\r', '\n', ',', '}', ']':
		return true
	}
	return false
}

// SkipValue returns the end of the JSON value starting at b[i] (-1: none).
// A container's end is only found, not checked (the bytes passed
// CheckJSON, or are refused as a whole); a string, number or literal is
// read as the checker reads it.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	var end int
	ok := false
	switch c := b[i]; {
	case c == '"':
		end, _, ok = scanString(b, i)
	case c == '{' || c == '[':
		return skipContainer(b, i)
	case c == 't':
		end, ok = scanLiteral(b, i, "true")
	case c == 'f':
		end, ok = scanLiteral(b, i, "false")
	case c == 'n':
		end, ok = scanLiteral(b, i, "null")
	default:
		end, ok = scanNumber(b, i)
	}
	if !ok || !endsToken(b, end) {
		return -1
	}
	return end
}

// skipContainer returns the end of the object or array at b[i] (-1: it
// does not end, or a string in it is not one).
func skipContainer(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			end, _, ok := scanString(b, j)
			if !ok {
				return -1
			}
			j = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// Unquote decodes the JSON string raw (quotes included) exactly as
// encoding/json decodes one into a Go string: escapes resolved, a lone or
// broken surrogate escape and every byte of invalid UTF-8 read as U+FFFD.
// false when raw is not one JSON string.
func Unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	b, ok := appendUnquoted(make([]byte, 0, len(raw)), raw[1:len(raw)-1])
	if !ok {
		return "", false
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), true
}

// appendUnquoted appends the decoded content of a JSON string (s is what
// lies between its quotes) to dst: false on a quote, a control character or
// an escape JSON does not have.
func appendUnquoted(dst, s []byte) ([]byte, bool) {
	for r := 0; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			if r+1 >= len(s) {
				return nil, false
			}
			var ok bool
			if dst, r, ok = appendEscape(dst, s, r); !ok {
				return nil, false
			}
		case c == '"' || c < ' ':
			return nil, false
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst, true
}

// appendEscape appends the escape at s[r] (a backslash with at least one
// byte after it) decoded, and returns where the next byte is.
func appendEscape(dst, s []byte, r int) ([]byte, int, bool) {
	switch s[r+1] {
	case '"', '\\', '/':
		return append(dst, s[r+1]), r + 2, true
	case 'b':
		return append(dst, '\b'), r + 2, true
	case 'f':
		return append(dst, '\f'), r + 2, true
	case 'n':
		return append(dst, '\n'), r + 2, true
	case 'r':
		return append(dst, '\r'), r + 2, true
	case 't':
		return append(dst, '\t'), r + 2, true
	case 'u':
		rr, ok := hex4(s, r+2)
		if !ok {
			return nil, 0, false
		}
		r += 6
		if rr >= 0xD800 && rr < 0xE000 {
			// A high surrogate followed by a low one's escape is one
			// rune; anything else is U+FFFD, and what follows is read on
			// its own (encoding/json's reading).
			if rr < 0xDC00 && r+1 < len(s) && s[r] == '\\' && s[r+1] == 'u' {
				if lo, ok := hex4(s, r+2); ok && lo >= 0xDC00 && lo < 0xE000 {
					return utf8.AppendRune(dst, (rr-0xD800)<<10|(lo-0xDC00)+0x10000), r + 6, true
				}
			}
			rr = utf8.RuneError
		}
		return utf8.AppendRune(dst, rr), r, true
	}
	return nil, 0, false
}
