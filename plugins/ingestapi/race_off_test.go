//go:build !race

package api

// raceAllocsPerItem: see race_on_test.go.
const raceAllocsPerItem = 0
