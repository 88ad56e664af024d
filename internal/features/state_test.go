package features

import (
	"math/big"
	"testing"
)

// A bucket's sum that leaves int64 (10,000 of the largest amounts in one
// day) stays exact, comes back to int64 when it falls again, survives an
// encode and decode, and goes with its bucket when the window passes.
func TestCellSumsBeyondInt64(t *testing.T) {
	const units = 999999999999999 // 99,999,999,999.9999
	st := newState()
	t0 := int64(1_780_000_000)
	want := new(big.Int)
	for i := range 10000 {
		st.applyTxn(t0+int64(i), false, "IDR", units, true, nil)
		want.Add(want, big.NewInt(units))
	}
	check := func(what string, st *state, want *big.Int) {
		t.Helper()
		w := st.windows("IDR")
		if got := w[3].os.number(); got != fromUnits(want.String()) {
			t.Fatalf("%s: 30d sum %s, want %s", what, got, fromUnits(want.String()))
		}
	}
	check("after 10,000", st, want)
	if len(st.bigs) == 0 {
		t.Fatal("no sum left int64")
	}
	back, err := decode(string(encode(nil, 1, st)))
	if err != nil {
		t.Fatal(err)
	}
	check("decoded", back, want)
	// Negative amounts bring the day's sum back into int64.
	for i := range 9000 {
		st.applyTxn(t0+int64(i), false, "IDR", -units, true, nil)
		want.Sub(want, big.NewInt(units))
	}
	check("after 9,000 back", st, want)
	if len(st.bigs) != 0 {
		t.Fatalf("%d sums still big at %s", len(st.bigs), want)
	}
	// 31 days later every bucket and its cells are gone.
	st.applyTxn(t0+31*86400, false, "EUR", 1, true, nil)
	st.prune(0)
	if w := st.windows("IDR"); !w[3].os.isZero() || len(st.sums[lvDay]) != 1 || len(st.bigs) != 0 {
		t.Fatalf("after the window: IDR %s, %d day cells", w[3].os.number(), len(st.sums[lvDay]))
	}
}
