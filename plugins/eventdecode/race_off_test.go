//go:build !race

package eventdecode

// raceAllocsPerRecord: see race_on_test.go.
const raceAllocsPerRecord = 0
