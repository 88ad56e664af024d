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

// parseUTC reads exactly "2006-01-02T15:04:05Z" with 0 to 9 fractional
// digits, each field in its range, into the time.Time UnmarshalJSON returns
// for it (time.Date's in UTC, which time.Unix(…).UTC() is), and reports
// false for anything else, valid or not. UnmarshalJSON's general parser and
// time.Date's normalising cost 3 % of the persister's CPU for a record's
// two times.
func parseUTC(s string) (time.Time, bool) {
	n := len(s)
	if n < 20 || n == 21 || n > 30 || s[n-1] != 'Z' ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	ok := true
	num := func(from, to int) int {
		v := 0
		for i := from; i < to; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				ok = false
				return 0
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 7), num(8, 10)
	hour, minute, sec := num(11, 13), num(14, 16), num(17, 19)
	nsec := 0
	if n > 20 {
		if s[19] != '.' {
			return time.Time{}, false
		}
		nsec = num(20, n-1)
		for range 9 - (n - 21) {
			nsec *= 10
		}
	}
	if !ok || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	days := daysFromCivil(year, month, day)
	return time.Unix(days*86400+int64(hour*3600+minute*60+sec), int64(nsec)).UTC(), true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the days from 1970-01-01 to a proleptic Gregorian date
// (Howard Hinnant's days_from_civil), for years 0 to 9999.
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era*146097 + doe - 719468)
}
