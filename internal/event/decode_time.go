package event

import "time"

// decodeFast's reading of times, exactly as time.Time's UnmarshalJSON.

// time reads a string as time.Time's UnmarshalJSON does, which is what the
// library calls: the UTC form Encode writes by parseUTC, anything else by
// UnmarshalJSON itself.
func (d *fastDecoder) time(into *time.Time) bool {
	start := d.i
	d.decoded = false
	v, ok := d.str()
	if !ok || d.decoded {
		// time.Time's UnmarshalJSON reads the quoted bytes as they
		// are, escapes and all: left to encoding/json.
		return false
	}
	if t, ok := parseUTC(v); ok {
		*into = t
		return !t.IsZero()
	}
	// Year 1's first instant is time.Time's zero, which the envelope
	// reads as absent: the library path tells the two apart.
	return into.UnmarshalJSON(d.b[start:d.i]) == nil && !into.IsZero()
}

// parseUTC reads exactly "2006-01-02T15:04:05Z" with 1 to 9 fractional
// digits or none, each field in its range (ParseRFC3339), into the
// time.Time UnmarshalJSON returns for it, and reports false for anything
// else, valid or not: UnmarshalJSON gives a time with an offset its own
// zone, which only the library builds.
func parseUTC(s string) (time.Time, bool) {
	t, _, ok := ParseRFC3339(s)
	return t, ok && s[len(s)-1] == 'Z'
}
