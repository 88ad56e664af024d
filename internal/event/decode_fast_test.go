package event

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleUndecided is sampleTransaction without its decision: the shape the
// ingest API writes, which decodeFast reads.
var sampleUndecided = sampleTransaction[:strings.Index(sampleTransaction, `,"decision":`)] + "}"

// Decode's envelope owns its memory: a caller may reuse the record's buffer
// at once. DecodeShared's reads the same, from the record's own bytes.
func TestDecodeCopiesDecodeSharedShares(t *testing.T) {
	b := []byte(sampleUndecided)
	owned, err := DecodeAt(b, sampleNow)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := decodeAt(b, sampleNow, true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(owned, shared) {
		t.Fatalf("Decode and DecodeShared disagree:\n%#v\n%#v", owned, shared)
	}
	want := owned.ExternalID + string(owned.Metadata)
	for i := range b {
		b[i] = 'x'
	}
	if got := owned.ExternalID + string(owned.Metadata); got != want {
		t.Fatalf("Decode's envelope changed with its record's buffer: %q, want %q", got, want)
	}
	if shared.ExternalID == owned.ExternalID || string(shared.Metadata) == string(owned.Metadata) {
		t.Fatalf("DecodeShared's envelope did not share the record's bytes")
	}
}

// DecodeSharedInto reads what DecodeShared reads, whatever dst held
// before, with a record's counterparty in the slot it was given when the
// fast path read it, and errors as DecodeShared's.
func TestDecodeSharedIntoIsDecodeShared(t *testing.T) {
	noCounterparty := sampleUndecided[:strings.Index(sampleUndecided, `,"counterparty":`)] +
		sampleUndecided[strings.Index(sampleUndecided, `,"metadata":`):]
	// A key in another case: encoding/json's path, which allocates its own.
	escaped := strings.Replace(sampleUndecided, `"name":"Hausverwaltung`, `"Name":"Hausverwaltung`, 1)
	for _, c := range []struct {
		name, in string
		inSlot   bool // the counterparty is the slot given
	}{
		{"counterparty", sampleUndecided, true},
		{"decided", sampleTransaction, true},
		{"no counterparty", noCounterparty, false},
		{"escaped", escaped, false},
		{"not an envelope", `{"v":1,"kind":"transaction"}`, false},
		{"not JSON", `{"v":1,`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, wantErr := decodeAt([]byte(c.in), sampleNow, true)
			// dst holds another record's envelope, and another slot's
			// counterparty: none of it may show through.
			dst, err := decodeAt([]byte(sampleTransaction), sampleNow, true)
			if err != nil {
				t.Fatal(err)
			}
			var cp Counterparty
			err = decodeSharedIntoAt(&dst, &cp, []byte(c.in), sampleNow)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("DecodeSharedInto: %v, DecodeShared: %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(dst, want) {
				t.Fatalf("DecodeSharedInto and DecodeShared disagree:\n%#v\n%#v", dst, want)
			}
			if got := dst.Counterparty == &cp; got != c.inSlot {
				t.Fatalf("the counterparty is the slot given: %v, want %v", got, c.inSlot)
			}
			if !c.inSlot && want.Counterparty == nil && cp != (Counterparty{}) {
				t.Fatalf("a record without a counterparty wrote the slot: %#v", cp)
			}
		})
	}
}

// A name beyond ASCII leaves a record plain (CheckText has nothing to find
// in valid UTF-8 without control characters), a DEL anywhere does not.
func TestDecodeFastPlainIsAboutDELOnly(t *testing.T) {
	for _, c := range []struct {
		in    string
		plain bool
	}{
		{sampleUndecided, true},
		{strings.Replace(sampleUndecided, `"mobile"`, `"Köln Novák €"`, 1), true},
		{strings.Replace(sampleUndecided, `"mobile"`, "\"mob\x7file\"", 1), false},
		{strings.Replace(sampleUndecided, `"mobile"`, "\"Köln\x7f\"", 1), false},
	} {
		_, plain, ok := decodeFast([]byte(c.in), true)
		if !ok || plain != c.plain {
			t.Errorf("decodeFast(%q): plain %v, ok %v; want plain %v", c.in, plain, ok, c.plain)
		}
		fastAgrees(t, []byte(c.in))
	}
}

// TestSpecial8FindsEverySpecialByte: the eight-at-a-time scan of str must
// stop at every byte the byte loop treats specially, in any position and
// beside any other byte, or a string could hide a quote or an escape.
func TestSpecial8FindsEverySpecialByte(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x7f }
	for _, fill := range []byte{'a', ' ', '~', 0x00, 0xff, '"'} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				want := special(byte(c)) || special(fill)
				if got := special8(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("special8(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}

// parseUTC reads what it accepts exactly as UnmarshalJSON does (the same
// time.Time, location included), and accepts every canonical UTC form:
// every day of years around the leap rules' edges, each with and without
// fractions, and edited strings it must refuse or agree on.
func TestParseUTCIsUnmarshalJSON(t *testing.T) {
	agree := func(s string) bool {
		t.Helper()
		got, ok := parseUTC(s)
		var want time.Time
		err := want.UnmarshalJSON([]byte(`"` + s + `"`))
		if ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Fatalf("parseUTC(%q) = %#v, UnmarshalJSON %#v, %v", s, got, want, err)
		}
		return ok
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, year := range []int{0, 1, 4, 100, 399, 400, 1600, 1899, 1900, 1969, 1970, 1999, 2000, 2024, 2026, 2100, 2400, 9999} {
		for d := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == year; d = d.AddDate(0, 0, 1) {
			at := d.Add(time.Duration(r.Int64N(int64(24 * time.Hour))))
			for _, layout := range []string{"2006-01-02T15:04:05Z", "2006-01-02T15:04:05.000Z", "2006-01-02T15:04:05.000000Z", "2006-01-02T15:04:05.999999999Z", "2006-01-02T15:04:05.0Z"} {
				s := at.Format(layout)
				if len(s) == len(layout) && !agree(s) {
					t.Fatalf("parseUTC refused %q", s)
				}
			}
		}
	}
	for _, s := range []string{"2026-02-29T00:00:00Z", "2024-02-29T23:59:59Z", "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T23:60:00Z", "2026-01-01T23:59:60Z",
		"2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567891Z", "2026-01-01T00:00:00+01:00", "2026-01-01t00:00:00Z",
		"2026-01-01T00:00:00z", "2026-01-01 00:00:00Z", "+026-01-01T00:00:00Z", "2026-1-01T00:00:00Z", "2026-01-01T00:00:00,5Z"} {
		agree(s)
	}
	base := []byte("2026-11-30T07:41:12.345678Z")
	for i := 0; i < 200000; i++ {
		b := append([]byte(nil), base...)
		for k := r.IntN(2) + 1; k > 0; k-- {
			b[r.IntN(len(b))] = "0123456789-:.TZ+x"[r.IntN(17)]
		}
		agree(string(b[:len(b)-r.IntN(3)]))
	}
}
