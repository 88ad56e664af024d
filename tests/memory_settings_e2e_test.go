package tests

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/identity"
)

// A role's memory settings come from its pipeline's YAML (the input's
// process_memory), not from the file's name: a renamed copy of a shipped
// pipeline runs under the same soft memory limit and GOGC as the original,
// and the role's SP_* setting changes them. The processes reach no service
// (every address is a closed port): the settings apply when the input is
// built, before anything connects.
func TestMemorySettingsFollowThePipelineNotItsFileName(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name, pipeline, copyAs string
		env                    map[string]string
		limit, gogc            float64
	}{
		{"stream", "pipelines/stream.yaml", "", nil, 300 * mib, 100},
		{"stream renamed", "pipelines/stream.yaml", "rules-engine.yaml", nil, 300 * mib, 100},
		{"stream with its setting", "pipelines/stream.yaml", "rules-engine.yaml", map[string]string{"SP_STREAM_MEMORY_LIMIT": "400MiB"}, 400 * mib, 100},
		{"ingest renamed", "pipelines/ingest.yaml", "api.yaml", nil, 150 * mib, 300},
		{"ingest with its settings", "pipelines/ingest.yaml", "api.yaml", map[string]string{"SP_INGEST_GOGC": "200", "SP_MEMORY_LIMIT": "180MiB"}, 180 * mib, 200},
		{"persist renamed as a stream", "pipelines/persist.yaml", "stream.yaml", nil, 150 * mib, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pipeline := tc.pipeline
			if tc.copyAs != "" {
				b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), tc.pipeline))
				if err != nil {
					t.Fatal(err)
				}
				pipeline = filepath.Join(t.TempDir(), tc.copyAs)
				if err := os.WriteFile(pipeline, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			limit, gogc := memorySettingsOf(t, pipeline, tc.env)
			if limit != tc.limit || gogc != tc.gogc {
				t.Errorf("%s as %s: soft memory limit %.0f MiB and GOGC %.0f, want %.0f MiB and %.0f",
					tc.pipeline, filepath.Base(pipeline), limit/mib, gogc, tc.limit/mib, tc.gogc)
			}
		})
	}
}

// memorySettingsOf runs pipeline with env (services unreachable) and reads
// the process's soft memory limit and GOGC from its /metrics.
func memorySettingsOf(t *testing.T, pipeline string, extra map[string]string) (limit, gogc float64) {
	t.Helper()
	enc, fp := identity.DevKeys()
	closed := "127.0.0.1:1"
	env := map[string]string{
		"SP_KAFKA_BROKERS":   closed,
		"SP_REDIS_URL":       "redis://" + closed + "/0",
		"SP_DB_URL":          "postgres://speculapro_app:x@" + closed + "/speculapro",
		"SP_INGEST_ADDR":     testenv.FreeAddr(t),
		"SP_ENCRYPTION_KEY":  enc,
		"SP_FINGERPRINT_KEY": fp,
		"GOMEMLIMIT":         "",
		"GOGC":               "",
	}
	for k, v := range extra {
		env[k] = v
	}
	p := newBinProcess(t)
	p.start(t, env, p.runArgs(pipeline)...)
	// Nothing to stop cleanly: it reached nothing, and a kafka_franz input
	// still dialling waits out its shutdown timeout.
	defer p.kill(t)
	var scrape string
	if !poll(waitBound, 100*time.Millisecond, func() bool {
		s, err := p.scrape()
		scrape = s
		return err == nil && metricSum(s, "go_gc_gomemlimit_bytes") > 0
	}) {
		t.Fatalf("no go_gc_gomemlimit_bytes on /metrics:\n%s", p.tail(2000))
	}
	return metricSum(scrape, "go_gc_gomemlimit_bytes"), metricSum(scrape, "go_gc_gogc_percent")
}
