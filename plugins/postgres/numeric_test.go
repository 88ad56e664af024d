package postgres

import (
	"testing"
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
	}
	for _, bad := range []string{"", "abc", "1.2.3"} {
		if _, err := decimalToNumeric(bad); err == nil {
			t.Errorf("decimalToNumeric(%q) succeeded", bad)
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
