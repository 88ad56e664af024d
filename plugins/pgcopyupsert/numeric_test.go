package pgcopyupsert

import (
	"encoding/binary"
	"math/big"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// appendNumeric's bytes, read back by pgx's own numeric decoder, are the
// decimal it was given, with its number of decimals as the scale.
func TestAppendNumeric(t *testing.T) {
	m := pgtype.NewMap()
	for _, in := range []string{
		"0", "-0", "0.0000", "1249.90", "-5", "0.0001", "0.00005", "12345.5", "10000", "100000000",
		"9999999999999999.9999", "-9999999999999999.9999", "12345678901234567890123.5", "007.10", "1.23456789",
		"999999999999999999", "9999999999999999999", "-0.0100", "5000.0000",
	} {
		b, err := appendNumeric(nil, in)
		if err != nil {
			t.Fatalf("appendNumeric(%q): %v", in, err)
		}
		if n := int(binary.BigEndian.Uint32(b)); n != len(b)-4 {
			t.Fatalf("appendNumeric(%q): length word %d, %d bytes follow", in, n, len(b)-4)
		}
		var got pgtype.Numeric
		if err := m.Scan(pgtype.NumericOID, pgx.BinaryFormatCode, b[4:], &got); err != nil {
			t.Fatalf("decoding appendNumeric(%q): %v", in, err)
		}
		want, _ := new(big.Rat).SetString(in)
		value := new(big.Rat).SetInt(got.Int)
		exp := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs32(got.Exp))), nil))
		if got.Exp < 0 {
			value.Quo(value, exp)
		} else {
			value.Mul(value, exp)
		}
		if value.Cmp(want) != 0 {
			t.Errorf("appendNumeric(%q) reads back as %s", in, value.FloatString(8))
		}
		scale := 0
		if i := strings.IndexByte(in, '.'); i >= 0 {
			scale = len(in) - i - 1
		}
		if dscale := int(binary.BigEndian.Uint16(b[10:])); dscale != scale {
			t.Errorf("appendNumeric(%q): scale %d, want %d", in, dscale, scale)
		}
	}
	for _, bad := range []string{"", "abc", "1.2.3", "-", "1-", "-.5", "5.", "1e5", " 1", "+1"} {
		if _, err := appendNumeric(nil, bad); err == nil {
			t.Errorf("appendNumeric(%q) succeeded", bad)
		}
	}
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}
