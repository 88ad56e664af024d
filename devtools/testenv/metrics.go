package testenv

import (
	"fmt"
	"strings"
	"sync"
)

// Metrics stands in for the engine's metrics in a component's unit test: it
// records what the component counted, by metric name and label values, so
// the test can check the counts its contract names.
type Metrics struct {
	mu sync.Mutex
	n  map[string]int64
}

// Metric is one metric of a Metrics. It has the methods of the engine's
// counter, gauge and timer, so it stands in for whichever a component
// declares; Incr adds, Set overwrites, Timing is not recorded.
type Metric struct {
	m    *Metrics
	name string
}

// Metric is the metric name of m.
func (m *Metrics) Metric(name string) Metric { return Metric{m, name} }

// Get is what was recorded under key, `name{label,label}` (`name{}` for a
// metric without labels); 0 when nothing was.
func (m *Metrics) Get(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[key]
}

// String is everything recorded, for a failure message.
func (m *Metrics) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.n)
}

func (m *Metrics) record(key string, v int64, set bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int64{}
	}
	if set {
		m.n[key] = v
	} else {
		m.n[key] += v
	}
}

func (m Metric) key(labels []string) string {
	return m.name + "{" + strings.Join(labels, ",") + "}"
}

// Incr adds n under the metric and labels.
func (m Metric) Incr(n int64, labels ...string) { m.m.record(m.key(labels), n, false) }

// Set records v under the metric and labels, as a gauge.
func (m Metric) Set(v int64, labels ...string) { m.m.record(m.key(labels), v, true) }

// Timing is accepted and not recorded.
func (Metric) Timing(int64, ...string) {}
