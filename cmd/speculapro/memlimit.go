package main

import (
	"os"
	"runtime/debug"
)

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT is
// not set: 150 MiB of Go-managed memory keeps every role's resident set
// under 200 MB at full speed (the rest is the binary's own pages and the
// runtime's), because the collector runs earlier when the heap nears it
// instead of letting it grow to twice the live data (GOGC=100). It is soft:
// a role whose live data needs more gets more (the runtime caps the
// collector at about half the CPU rather than fail), and GOMEMLIMIT (for
// example GOMEMLIMIT=512MiB, or "off") replaces it.
const defaultMemoryLimit = 150 << 20

// setMemoryLimit applies defaultMemoryLimit unless GOMEMLIMIT is set (the
// runtime has applied that one already).
func setMemoryLimit() {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
}
