package features

import (
	"strconv"
	"testing"
)

func TestUnits(t *testing.T) {
	tests := []struct {
		in, units, back string
		err             bool
	}{
		{in: "0", units: "0", back: "0.0000"},
		{in: "1234.5", units: "12345000", back: "1234.5000"},
		{in: "0.0001", units: "1", back: "0.0001"},
		{in: "-0.0001", units: "-1", back: "-0.0001"},
		{in: "0.00005", units: "1", back: "0.0001"},
		{in: "0.00004999", units: "0", back: "0.0000"},
		{in: "-0.00005", units: "-1", back: "-0.0001"},
		{in: "-0.00001", units: "0", back: "0.0000"},
		{in: "007.10", units: "71000", back: "7.1000"},
		{in: "99999999999.9999", units: "999999999999999", back: "99999999999.9999"},
		{in: "100000000000", err: true},
		{in: "99999999999.99995", err: true},
		{in: "1e5", err: true},
		{in: ".5", err: true},
	}
	for _, tc := range tests {
		u, err := toUnits(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("toUnits(%q) = %s, want an error", tc.in, u)
			}
			continue
		}
		if err != nil || u != tc.units {
			t.Errorf("toUnits(%q) = %q, %v; want %q", tc.in, u, err, tc.units)
			continue
		}
		if got := fromUnits(u); string(got) != tc.back {
			t.Errorf("fromUnits(%q) = %q, want %q", u, got, tc.back)
		}
	}
	if got := fromUnits(nil); got != "0.0000" {
		t.Errorf("fromUnits(nil) = %q", got)
	}
}

func TestUnitsNumber(t *testing.T) {
	for _, n := range []int64{1, -1, 9, 10, 9999, 10000, -10000, 12345678, -5, 1 << 62, -(1 << 62), 1<<63 - 1} {
		want := fromUnits(strconv.FormatInt(n, 10))
		if got := unitsNumber(n); got != want {
			t.Errorf("unitsNumber(%d) = %q, want %q", n, got, want)
		}
	}
}
