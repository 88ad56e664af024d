//go:build !race

package ingestapi

// raceAllocsPerItem: see race_on_test.go.
const raceAllocsPerItem = 0
