package outbox

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/pgsystem"
)

// The start-up timeout field every outbox component has, beside
// pgsystem.URLFields.
const fieldStartupTimeout = "startup_timeout"

func startupTimeoutField() *service.ConfigField {
	return service.NewDurationField(fieldStartupTimeout).
		Description("How long the start-up role check waits for PostgreSQL to answer before the process gives up starting.").
		Default("30s").
		Advanced()
}

// newSystemPool builds a pool of at most maxConns speculapro_system
// connections without I/O; the component runs its start-up role check
// (CheckOnce) from Connect, or from its first Process.
func newSystemPool(conf *service.ParsedConfig, component string, maxConns int) (*pgsystem.Pool, error) {
	o := pgsystem.Options{Component: component, MaxConns: maxConns}
	var err error
	if o.URL, err = pgsystem.URLFromParsed(conf); err != nil {
		return nil, err
	}
	if o.StartupTimeout, err = conf.FieldDuration(fieldStartupTimeout); err != nil {
		return nil, err
	}
	return pgsystem.Open(o)
}
