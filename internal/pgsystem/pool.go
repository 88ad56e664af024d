package pgsystem

import (
	"github.com/redpanda-data/benthos/v4/public/service"
)

// The start-up timeout field every worker component has, beside URLFields.
const fieldStartupTimeout = "startup_timeout"

// StartupTimeoutField is the worker components' `startup_timeout` field.
func StartupTimeoutField() *service.ConfigField {
	return service.NewDurationField(fieldStartupTimeout).
		Description("How long the start-up role check waits for PostgreSQL to answer before the process gives up starting.").
		Default("30s").
		Advanced()
}

// OpenFromParsed builds a pool of at most maxConns speculapro_system
// connections from a component's URLFields and StartupTimeoutField without
// I/O; the component runs its start-up role check (CheckOnce) from Connect,
// or from its first Process.
func OpenFromParsed(conf *service.ParsedConfig, component string, maxConns int) (*Pool, error) {
	o := Options{Component: component, MaxConns: maxConns}
	var err error
	if o.URL, err = URLFromParsed(conf); err != nil {
		return nil, err
	}
	if o.StartupTimeout, err = conf.FieldDuration(fieldStartupTimeout); err != nil {
		return nil, err
	}
	return Open(o)
}
