package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/devtools/loadgen"
)

// runLoadgenCLI runs `speculapro loadgen args…` as the CLI would and returns
// the error and what went to stderr.
func runLoadgenCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := &cli.App{Name: "speculapro", Writer: &stdout, ErrWriter: &stderr, Commands: []*cli.Command{loadgenCommand()}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.RunContext(ctx, append([]string{"speculapro", "loadgen"}, args...))
	if stdout.Len() != 0 {
		t.Errorf("loadgen wrote to stdout (progress and summary belong on stderr):\n%s", stdout.String())
	}
	return stderr.String(), err
}

func TestLoadgenCommand(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "lgcmd.txn.ingested", "lgcmd.account.events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"SP_KAFKA_TLS_ENABLED", "SP_KAFKA_TLS_CA_FILE", "SP_KAFKA_TLS_CERT_FILE", "SP_KAFKA_TLS_KEY_FILE",
		"SP_KAFKA_SASL_MECHANISM", "SP_KAFKA_USERNAME", "SP_KAFKA_PASSWORD", "SP_ENCRYPTION_KEY", "SP_FINGERPRINT_KEY",
		"SP_DB_SYSTEM_URL"} {
		t.Setenv(k, "")
	}
	t.Setenv("SP_KAFKA_BROKERS", c.ListenAddrs()[0])
	t.Setenv("SP_KAFKA_TOPIC_PREFIX", "lgcmd.")
	small := []string{"--count", "500", "--accounts", "100", "--workspaces", "2", "--counterparties", "40"}
	manifest := filepath.Join(t.TempDir(), "m.json")
	eventsManifest := filepath.Join(t.TempDir(), "e.json")

	tests := []struct {
		name      string
		args      []string
		errHas    string
		stderrHas string
	}{
		{"no keys and no --dev-keys", append(small, "--known-accounts-ratio", "0"), "--dev-keys", ""},
		{"known accounts without a database", append(small, "--dev-keys"), "needs --db-url", ""},
		{"a topic that does not exist", append(small, "--dev-keys", "--known-accounts-ratio", "0", "--topic", "nope"),
			"topic nope does not exist", ""},
		{"an invalid setting", []string{"--dev-keys", "--known-accounts-ratio", "0", "--workspaces", "0"}, "workspaces 0", ""},
		{"a run", append(small, "--dev-keys", "--known-accounts-ratio", "0", "--manifest", manifest, "--seed", "7"), "",
			"sent 500 transactions to lgcmd.txn.ingested"},
		{"account events to a topic that does not exist", append(small, "--dev-keys", "--known-accounts-ratio", "0",
			"--account-events", "100", "--events-topic", "nope.events"), "topic nope.events does not exist", ""},
		{"a run with account events", append(small, "--dev-keys", "--known-accounts-ratio", "0", "--manifest", eventsManifest,
			"--seed", "8", "--account-events", "100"), "", "sent 100 account events to lgcmd.account.events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stderr, err := runLoadgenCLI(t, tt.args...)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.HasPrefix(err.Error(), "loadgen: ") {
					t.Fatalf("err = %v, want loadgen: … %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadgen: %v\n%s", err, stderr)
			}
			if !strings.Contains(stderr, tt.stderrHas) || !strings.Contains(stderr, "acked 500, failed 0") {
				t.Fatalf("stderr lacks %q and the acked count:\n%s", tt.stderrHas, stderr)
			}
		})
	}

	m, err := loadgen.ReadManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete || m.Acked != 500 || m.Seed != 7 || m.Topic != "lgcmd.txn.ingested" || len(m.WorkspaceIDs) != 2 || m.Events != nil {
		t.Fatalf("manifest %+v", m)
	}
	m, err = loadgen.ReadManifest(eventsManifest)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete || m.AccountEvents != 100 || m.Events == nil || !m.Events.Complete || m.Events.Acked != 100 ||
		m.Events.Topic != "lgcmd.account.events" {
		t.Fatalf("manifest %+v, events %+v", m, m.Events)
	}
}
