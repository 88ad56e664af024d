package features

import (
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
)

// scale is the number of decimal places Redis keeps: the
// transactions.amount column is numeric(20,4).
const scale = 4

// maxUnits bounds one transaction's amount in units of 0.0001 (10^11 in
// currency units). Sums are exact beyond int64 (math/big), but the bound is
// kept: it is the documented behaviour, and no real amount passes it.
const maxUnits = 1_000_000_000_000_000

var errAmountRange = errors.New("amount outside ±10^11")

// toUnits turns a decimal string ("1234.5", "-0.00005") into an integer
// string of units of 0.0001 (parseUnits).
func toUnits(s string) (string, error) {
	u, err := parseUnits(s)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(u, 10), nil
}

// parseUnits turns a decimal string into units of 0.0001, rounding half
// away from zero at the fifth decimal as PostgreSQL's numeric(20,4) does.
// Only integer arithmetic: no float ever holds money.
func parseUnits(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(s, ".")
	if intPart == "" || !digits(intPart) || !digits(frac) {
		return 0, errors.New("amount is not a decimal")
	}
	roundUp := len(frac) > scale && frac[scale] >= '5'
	if len(frac) > scale {
		frac = frac[:scale]
	}
	for len(intPart) > 1 && intPart[0] == '0' {
		intPart = intPart[1:]
	}
	if len(intPart) > 12 {
		return 0, errAmountRange
	}
	// Integer part then exactly four decimals, without building a string.
	var u int64
	for i := 0; i < len(intPart); i++ {
		u = u*10 + int64(intPart[i]-'0')
	}
	for i := range scale {
		u *= 10
		if i < len(frac) {
			u += int64(frac[i] - '0')
		}
	}
	if roundUp {
		u++
	}
	if u >= maxUnits {
		return 0, errAmountRange
	}
	if neg {
		u = -u
	}
	return u, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// fromUnits formats an integer string of units as a decimal with exactly
// four places ("1234.5000"); nil (no such field yet) is zero. Sums are
// always written with four places, so equal sums are equal strings.
func fromUnits(v any) json.Number {
	s, _ := v.(string)
	if s == "" || s == "0" {
		return "0.0000"
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	out := s[:len(s)-scale] + "." + s[len(s)-scale:]
	if neg {
		out = "-" + out
	}
	return json.Number(out)
}

// amt is an exact sum of money in units of 0.0001: an int64, or a big.Int
// once it would leave int64 (a huge sum of huge amounts).
type amt struct {
	n int64
	b *big.Int // non-nil: the value is b (n unused)
}

func (a *amt) add(x amt) {
	if a.b == nil && x.b == nil {
		s := a.n + x.n
		if (x.n >= 0) == (s >= a.n) {
			a.n = s
			return
		}
	}
	r := new(big.Int).Add(a.bigVal(), x.bigVal())
	if r.IsInt64() {
		*a = amt{n: r.Int64()}
		return
	}
	*a = amt{b: r}
}

func (a amt) bigVal() *big.Int {
	if a.b != nil {
		return a.b
	}
	return big.NewInt(a.n)
}

func (a amt) isZero() bool { return a.b == nil && a.n == 0 }

// number formats a as a decimal with exactly four places (amount.go).
func (a amt) number() json.Number {
	if a.b != nil {
		return fromUnits(a.b.String())
	}
	if a.n == 0 {
		return "0.0000"
	}
	return unitsNumber(a.n)
}

// unitsNumber is fromUnits(strconv.FormatInt(n, 10)) in one allocation
// (the feature maps hold about 20 sums per event).
func unitsNumber(n int64) json.Number {
	var buf [24]byte
	i := len(buf)
	u := uint64(n)
	if n < 0 {
		u = uint64(-n)
	}
	for range scale {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	buf[i] = '.'
	for first := true; first || u > 0; first = false {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	if n < 0 {
		i--
		buf[i] = '-'
	}
	return json.Number(buf[i:])
}
