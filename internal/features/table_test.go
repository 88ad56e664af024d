package features

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTableKeepAsScan holds keep's shortcut (skip the scan when the lower
// bound already passes) to a plain scan over the same operations: sets of new
// and existing keys, values lowered and raised, decoded tables, and prunes at
// rising thresholds.
func TestTableKeepAsScan(t *testing.T) {
	tests := []struct {
		name    string
		decoded int // entries the table starts with, as the decoder fills them
		ops     int
	}{
		{"empty", 0, 200},
		{"decoded short", 5, 200},
		{"decoded long", 300, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.decoded)))
			var got table[uint64]
			want := map[uint64]int64{}
			keys, vals := make([]uint64, tt.decoded), make([]int64, tt.decoded)
			for i := range keys {
				keys[i], vals[i] = uint64(i), 1000+rng.Int64N(1000)
				want[keys[i]] = vals[i]
			}
			got.reset(keys, vals)
			threshold := int64(0)
			for range tt.ops {
				switch rng.IntN(4) {
				case 0, 1:
					k, v := rng.Uint64N(400), threshold+rng.Int64N(1500)-200
					got.set(k, v)
					want[k] = v
				case 2:
					threshold += rng.Int64N(50)
					ok := func(v int64) bool { return v > threshold }
					got.keep(ok)
					for k, v := range want {
						if !ok(v) {
							delete(want, k)
						}
					}
				case 3:
					k := rng.Uint64N(400)
					v, found := got.get(k)
					wv, wfound := want[k]
					if found != wfound || v != wv {
						t.Fatalf("get(%d) = %d, %v; want %d, %v", k, v, found, wv, wfound)
					}
				}
			}
			ok := func(v int64) bool { return v > threshold }
			got.keep(ok)
			for k, v := range want {
				if !ok(v) {
					delete(want, k)
				}
			}
			gk := slices.Clone(got.keys)
			slices.Sort(gk)
			var wk []uint64
			for k := range want {
				wk = append(wk, k)
			}
			slices.Sort(wk)
			if !slices.Equal(gk, wk) {
				t.Fatalf("kept %d keys, want %d", len(gk), len(wk))
			}
			for i, k := range got.keys {
				if got.vals[i] != want[k] {
					t.Fatalf("key %d holds %d, want %d", k, got.vals[i], want[k])
				}
			}
		})
	}
}
