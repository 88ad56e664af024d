package postgres

import (
	"math/big"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

func TestDecimalToNumeric(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"1249.90", "124990e-2"},
		{"0", "0e0"},
		{"-5", "-5e0"},
		{"0.0001", "1e-4"},
		{"12345678901234567890123.5", "123456789012345678901235e-1"},
	}
	for _, tt := range tests {
		n, err := decimalToNumeric(tt.in)
		if err != nil {
			t.Fatalf("decimalToNumeric(%q): %v", tt.in, err)
		}
		if got := n.Int.String() + "e" + itoa(n.Exp); got != tt.want {
			t.Errorf("decimalToNumeric(%q) = %s, want %s", tt.in, got, tt.want)
		}
		// The COPY's allocation-free variant agrees.
		var m pgtype.Numeric
		var i big.Int
		if err := decimalIntoNumeric(&m, &i, tt.in); err != nil {
			t.Fatalf("decimalIntoNumeric(%q): %v", tt.in, err)
		}
		if got := m.Int.String() + "e" + itoa(m.Exp); got != tt.want || !m.Valid {
			t.Errorf("decimalIntoNumeric(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	for _, in := range []string{"-.5", "5.", "999999999999999999", "9999999999999999999", "-0.0100"} {
		a, err := decimalToNumeric(in)
		var m pgtype.Numeric
		var i big.Int
		err2 := decimalIntoNumeric(&m, &i, in)
		if (err == nil) != (err2 == nil) || (err == nil && (a.Int.Cmp(m.Int) != 0 || a.Exp != m.Exp)) {
			t.Errorf("%q: decimalToNumeric %v/%v, decimalIntoNumeric %v/%v", in, a, err, m, err2)
		}
	}
	for _, bad := range []string{"", "abc", "1.2.3", "-", "1-"} {
		if _, err := decimalToNumeric(bad); err == nil {
			t.Errorf("decimalToNumeric(%q) succeeded", bad)
		}
		var m pgtype.Numeric
		var i big.Int
		if err := decimalIntoNumeric(&m, &i, bad); err == nil {
			t.Errorf("decimalIntoNumeric(%q) succeeded", bad)
		}
	}
}

func itoa(e int32) string {
	if e < 0 {
		return "-" + itoa(-e)
	}
	if e < 10 {
		return string(rune('0' + e))
	}
	return itoa(e/10) + string(rune('0'+e%10))
}
