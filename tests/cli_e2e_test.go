package tests

import (
	"strings"
	"testing"
)

// The binary a user installs: our subcommands beside the engine's, every
// plugin listed with its docs, and a version that names the commit.
func TestCLIListsOurCommandsAndPlugins(t *testing.T) {
	run := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runBin(t, nil, args...)
		if code != 0 {
			t.Fatalf("speculapro %s exited %d:\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}

	help := run("--help")
	for _, cmd := range []string{"migrate", "topics", "dev", "loadgen", "workspace", "apikey", "rules", "webhook", "run", "streams", "lint", "test", "list", "blobl", "echo"} {
		if !strings.Contains(help, "\n   "+cmd+" ") {
			t.Errorf("speculapro --help does not list the %s command:\n%s", cmd, help)
		}
	}
	for _, cmd := range []string{"migrate", "topics", "dev", "loadgen", "rules", "webhook"} {
		if out := run(cmd, "--help"); !strings.Contains(out, "USAGE:") || len(out) < 200 {
			t.Errorf("speculapro %s --help is not useful:\n%s", cmd, out)
		}
	}
	if v := run("--version"); !strings.Contains(v, "commit ") {
		t.Errorf("speculapro --version does not name the commit: %s", v)
	}

	list := run("list", "inputs", "outputs", "processors", "metrics", "tracers")
	for _, plugin := range []string{"kafka_franz", "ingest_api", "pg_copy_upsert", "counterparty_fingerprint", "event_decode", "feature_update", "rule_eval", "pg_rule_hits", "outbox_claim", "outbox_send", "pg_partitions", "prometheus", "open_telemetry_collector"} {
		if !strings.Contains(list, "  - "+plugin+"\n") {
			t.Errorf("speculapro list does not name %s:\n%s", plugin, list)
		}
	}
	// Docs: the CUE schema carries each plugin's field descriptions.
	cue := run("list", "--format", "cue", "inputs", "outputs")
	for _, doc := range []string{"consumer_group", "checkpoint_limit", "max_in_flight", "dead_letter"} {
		if !strings.Contains(cue, doc) {
			t.Errorf("speculapro list --format cue lacks the field %s", doc)
		}
	}
}
