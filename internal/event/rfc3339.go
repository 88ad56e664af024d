package event

import "time"

// ParseRFC3339 reads the common form of an RFC 3339 time,
// YYYY-MM-DDTHH:MM:SS[.fraction] then Z or ±HH:MM (1 to 9 fractional digits,
// each field in its range), as time.Parse(time.RFC3339Nano) reads it: the
// instant in UTC and the year as written. It reports false for anything
// else, including what time.Parse refuses, so that the library decides
// those. time.Parse and time.Date's normalising cost 3 % of the persister's
// CPU for a record's two times, and as much of the ingest API's.
func ParseRFC3339(s string) (t time.Time, year int, ok bool) {
	n := len(s)
	if n < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, 0, false
	}
	ok = true
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
	i, nsec := 19, 0
	if s[i] == '.' {
		j := i + 1
		for j < n && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		digits := j - i - 1
		if digits < 1 || digits > 9 {
			return time.Time{}, 0, false
		}
		nsec = num(i+1, j)
		for range 9 - digits {
			nsec *= 10
		}
		i = j
	}
	offset := 0
	switch {
	case i == n-1 && s[i] == 'Z':
	case i == n-6 && (s[i] == '+' || s[i] == '-') && s[i+3] == ':':
		oh, om := num(i+1, i+3), num(i+4, i+6)
		if oh > 23 || om > 59 {
			return time.Time{}, 0, false
		}
		offset = (oh*60 + om) * 60
		if s[i] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, 0, false
	}
	if !ok || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, 0, false
	}
	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec-offset)
	return time.Unix(secs, int64(nsec)).UTC(), year, true
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
