package event

import (
	"errors"
	"fmt"
	"strconv"
)

// The rules CheckJSON applies to strings and numbers.

// checkEscapes refuses \u0000 and unpaired surrogate escapes inside JSON
// strings (encoding/json turns the latter into U+FFFD, PostgreSQL refuses
// them).
func checkEscapes(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			if c == '"' {
				in = true
			}
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			if i+1 >= len(raw) {
				return nil // the decoder reports it
			}
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(raw, i+2)
			if !ok {
				return nil
			}
			switch {
			case r == 0:
				return errors.New(ReasonNUL)
			case r >= 0xDC00 && r <= 0xDFFF:
				return errors.New(ReasonSurrogate)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					lo, ok = hex4(raw, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return errors.New(ReasonSurrogate)
				}
				i += 11
				continue
			}
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

// checkNumber checks a JSON number's digits before and after the point,
// its exponent applied.
func checkNumber(s string) error {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	mant, expText := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' || s[i] == 'E' {
			mant, expText = s[:i], s[i+1:]
			break
		}
	}
	intPart, frac := mant, ""
	for i := 0; i < len(mant); i++ {
		if mant[i] == '.' {
			intPart, frac = mant[:i], mant[i+1:]
			break
		}
	}
	digits := intPart + frac
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	if lead == len(digits) {
		return nil // zero, whatever its exponent
	}
	trail := 0
	for digits[len(digits)-1-trail] == '0' {
		trail++
	}
	exp := 0
	if expText != "" {
		if expText[0] == '+' {
			expText = expText[1:]
		}
		if len(expText) > 8 {
			return errors.New("a number whose exponent is out of range")
		}
		var err error
		if exp, err = strconv.Atoi(expText); err != nil {
			return errors.New("a number with a malformed exponent")
		}
	}
	intDigits := len(intPart) - lead + exp
	fracDigits := len(digits) - trail - len(intPart) - exp
	if intDigits > MaxJSONNumberDigits || fracDigits > MaxJSONNumberDigits {
		return fmt.Errorf("a number with more than %d digits before or after the point", MaxJSONNumberDigits)
	}
	return nil
}
