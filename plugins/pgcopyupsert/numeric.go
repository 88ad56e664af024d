package pgcopyupsert

import (
	"encoding/binary"
	"errors"
	"strings"
)

var errNotDecimal = errors.New("not a decimal string")

// numericSignNegative is the sign word of a negative numeric in
// PostgreSQL's binary format (0 is positive).
const numericSignNegative = 0x4000

// appendNumeric appends the decimal string s ("-1234.50": an optional minus,
// digits, optionally a dot and digits) to b in PostgreSQL's binary numeric
// format (ndigits, weight, sign, dscale, then base-10,000 digits), exactly,
// with no float or big.Int in between, so no cent is lost and nothing is
// allocated: converting through pgtype.Numeric cost a big.Int division per
// digit group and pgx's per-value encoding plans.
func appendNumeric(b []byte, s string) ([]byte, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	intPart, frac := s, ""
	if i := strings.IndexByte(s, '.'); i >= 0 {
		intPart, frac = s[:i], s[i+1:]
		if frac == "" {
			return b, errNotDecimal
		}
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return b, errNotDecimal
	}
	dscale := len(frac)
	intPart = strings.TrimLeft(intPart, "0")

	// The integer part in groups of four digits from the dot leftwards, the
	// fraction from the dot rightwards (its last group padded with zeros).
	var stack [16]int16
	digits := stack[:0]
	lead := (4 - len(intPart)%4) % 4
	weight := (len(intPart)+lead)/4 - 1
	for i := -lead; i < len(intPart); i += 4 {
		var g int16
		for k := i; k < i+4; k++ {
			g *= 10
			if k >= 0 {
				g += int16(intPart[k] - '0')
			}
		}
		digits = append(digits, g)
	}
	for i := 0; i < len(frac); i += 4 {
		var g int16
		for k := i; k < i+4; k++ {
			g *= 10
			if k < len(frac) {
				g += int16(frac[k] - '0')
			}
		}
		digits = append(digits, g)
	}
	// PostgreSQL's own form: no zero groups at either end, zero positive.
	for len(digits) > 0 && digits[0] == 0 {
		digits = digits[1:]
		weight--
	}
	for len(digits) > 0 && digits[len(digits)-1] == 0 {
		digits = digits[:len(digits)-1]
	}
	sign := uint16(0)
	if len(digits) == 0 {
		weight = 0
	} else if neg {
		sign = numericSignNegative
	}
	b = binary.BigEndian.AppendUint32(b, uint32(8+2*len(digits)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(digits)))
	b = binary.BigEndian.AppendUint16(b, uint16(int16(weight)))
	b = binary.BigEndian.AppendUint16(b, sign)
	b = binary.BigEndian.AppendUint16(b, uint16(dscale))
	for _, g := range digits {
		b = binary.BigEndian.AppendUint16(b, uint16(g))
	}
	return b, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
