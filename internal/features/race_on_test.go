//go:build race

package features

// raceEnabled: the race detector is on; sync.Pool then drops a share of
// what is put back on purpose, so allocation guards take a looser bound.
const raceEnabled = true
