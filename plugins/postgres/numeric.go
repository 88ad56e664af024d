package postgres

import (
	"errors"
	"math/big"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
)

var errNotDecimal = errors.New("not a decimal string")

// decimalToNumeric converts an envelope's decimal string ("-1234.50") into a
// pgtype.Numeric exactly, with no float in between, so no cent is lost on
// the way into a numeric column (binary COPY needs a typed value).
func decimalToNumeric(s string) (pgtype.Numeric, error) {
	digits := s
	exp := int32(0)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		digits = s[:i] + s[i+1:]
		exp = -int32(len(s) - i - 1)
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return pgtype.Numeric{}, errNotDecimal
	}
	return pgtype.Numeric{Int: n, Exp: exp, Valid: true}, nil
}

// decimalIntoNumeric is decimalToNumeric into n, reusing i for its digits
// (the COPY of a batch converts one amount at a time): without an
// allocation when the digits fit in an int64, as every amount the table's
// numeric(20,4) holds but the largest do.
func decimalIntoNumeric(n *pgtype.Numeric, i *big.Int, s string) error {
	var v int64
	digits, exp, neg := 0, int32(0), false
	fits := len(s) > 0
	for k := 0; k < len(s) && fits; k++ {
		switch c := s[k]; {
		case c == '-' && k == 0:
			neg = true
		case c == '.' && exp == 0 && k > 0:
			exp = -int32(len(s) - k - 1)
		case c >= '0' && c <= '9' && digits < 18:
			v = v*10 + int64(c-'0')
			digits++
		default:
			fits = false
		}
	}
	if !fits || digits == 0 {
		// Rare (more than 18 digits) or not a decimal: the general path
		// says which.
		num, err := decimalToNumeric(s)
		if err != nil {
			return err
		}
		*n = num
		return nil
	}
	if neg {
		v = -v
	}
	i.SetInt64(v)
	*n = pgtype.Numeric{Int: i, Exp: exp, Valid: true}
	return nil
}
