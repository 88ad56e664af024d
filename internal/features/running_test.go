package features

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// TestRunningWindowsEqualTheBucketSums applies random transactions to
// states (heads jumping by seconds to weeks, events up to 40 days late, two
// currencies, both directions, repeated other sides, amounts up to the
// largest counted, pruning and encoding and decoding between batches as
// the stream does) and checks after every event that the windows' running
// totals equal the sums over the buckets, in both currencies and in one
// the state never saw.
func TestRunningWindowsEqualTheBucketSums(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 37))
		st := newState()
		at := int64(1_780_000_000)
		members := make([]event.UUID, 1+r.IntN(30))
		for i := range members {
			members[i][0], members[i][1] = byte(i), byte(seed)
		}
		// Every eighth seed: mostly the largest amounts counted, so that
		// sums leave int64 (state.bigs) and the running totals stop and
		// start again.
		huge, n := seed%8 == 0, 3000
		if huge {
			n = 12000
		}
		for i := range n {
			switch k := r.IntN(100); {
			case k < 50:
				at += int64(r.IntN(90))
			case k < 75:
				at += int64(r.IntN(7200))
			case k < 80:
				at += int64(r.IntN(40 * 86400))
			}
			t0 := at
			if r.IntN(5) == 0 {
				t0 -= int64(r.IntN(40 * 86400))
			}
			units := int64(r.IntN(2_000_000)) - 200_000
			if huge && r.IntN(10) > 0 {
				units = maxUnits - 1 - int64(r.IntN(1000))
			}
			cur := []string{"EUR", "USD"}[r.IntN(2)]
			var member *event.UUID
			if r.IntN(4) > 0 {
				member = &members[r.IntN(len(members))]
			}
			st.applyTxn(t0, r.IntN(3) == 0, cur, units, true, member)
			for _, c := range []string{"EUR", "USD", "GBP"} {
				if got, want := st.windows(c), st.windowsScan(c); !sameTotals(got, want) {
					t.Fatalf("seed %d, event %d (%s): running %+v, buckets %+v", seed, i, c, got, want)
				}
			}
			if r.IntN(40) == 0 {
				// A batch ends: the state is pruned, and the next batch
				// either computes on it (a state kept) or decodes it.
				st.prune(0)
				if r.IntN(2) == 0 {
					d, err := decode(string(encode(nil, 1, st)))
					if err != nil {
						t.Fatal(err)
					}
					st.free()
					st = d
				}
			}
		}
		st.free()
	}
}

// sameTotals compares two windows' totals by value (a sum is an int64 or
// a big.Int).
func sameTotals(a, b [4]totals) bool {
	for i := range a {
		if a[i].oc != b[i].oc || a[i].ic != b[i].ic || a[i].dp != b[i].dp || a[i].ds != b[i].ds ||
			!sameAmt(a[i].os, b[i].os) || !sameAmt(a[i].is, b[i].is) {
			return false
		}
	}
	return true
}

// TestRunningTotalsStopBeyondTheirBound checks that the running totals
// stop (and the windows are summed over the buckets) once the amounts
// added could take a partial sum beyond int64, and start again from the
// buckets.
func TestRunningTotalsStopBeyondTheirBound(t *testing.T) {
	st := newState()
	at := int64(1_780_000_000)
	// 10,000 of the largest amounts a minute apart: 7 days, a sum beyond
	// int64.
	const n = 10000
	stopped := false
	for i := range n {
		st.applyTxn(at+int64(i)*60, false, "EUR", maxUnits-1, true, nil)
		st.windows("EUR")
		stopped = stopped || !st.run.ok
	}
	if !stopped || st.run.ok {
		t.Fatalf("running totals never stopped, or run with a sum beyond int64 (%d units added)", st.run.abs)
	}
	want := new(big.Int).Mul(big.NewInt(maxUnits-1), big.NewInt(n))
	if got := st.windows("EUR")[3].os; got.b == nil || got.b.Cmp(want) != 0 {
		t.Fatalf("30d sum %v, want %v", got.bigVal(), want)
	}
	// 40 days later every big sum has left the windows: they run again.
	st.applyTxn(at+50*86400, false, "EUR", 5, true, nil)
	st.prune(0)
	if w := st.windows("EUR"); !st.run.ok || w[3].os.n != 5 || w[3].oc != 1 {
		t.Fatalf("running %v, 30d %+v", st.run.ok, w[3])
	}
	st.free()
}
