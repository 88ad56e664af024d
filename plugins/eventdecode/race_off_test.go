//go:build !race

package event

// raceAllocsPerRecord: see race_on_test.go.
const raceAllocsPerRecord = 0
