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
