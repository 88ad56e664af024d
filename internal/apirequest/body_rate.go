package apirequest

import (
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The fields of the minimum body rate, the same in both APIs.
const (
	FieldMinBodyRate       = "min_body_rate"
	FieldMinBodyRateWindow = "min_body_rate_window"
)

// MinBodyRateFromParsed reads the minimum body rate and its window, the
// same fields in both APIs.
func MinBodyRateFromParsed(conf *service.ParsedConfig) (int64, time.Duration, error) {
	rate, err := conf.FieldInt(FieldMinBodyRate)
	if err != nil {
		return 0, 0, err
	}
	window, err := conf.FieldDuration(FieldMinBodyRateWindow)
	if err != nil {
		return 0, 0, err
	}
	if rate < 0 || window < time.Second {
		return 0, 0, fmt.Errorf("%s must not be negative, %s at least 1s", FieldMinBodyRate, FieldMinBodyRateWindow)
	}
	return int64(rate), window, nil
}
