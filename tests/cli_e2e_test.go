package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The binary a user installs: our subcommands beside the engine's, every
// plugin listed with its docs, and a version that names the commit.
func TestCLIListsOurCommandsAndPlugins(t *testing.T) {
	t.Parallel()
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

// `speculapro --help` describes SpeculaPro (not the engine's "stream
// processor for mundane tasks") and every command it lists is in the command
// table of docs/configuration.md; a binary built with plain `go build` (no
// -ldflags) names its commit, from the build information Go embeds.
func TestCLIHelpAndVersionDescribeSpeculaPro(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {}} {
		help, _, code := runBin(t, nil, args...)
		if code != 0 || !strings.Contains(help, "SpeculaPro transaction monitoring") || strings.Contains(help, "mundane") ||
			!strings.Contains(help, "COMMANDS:") {
			t.Errorf("speculapro %v (exit %d):\n%s", args, code, help)
		}
	}
	help, _, _ := runBin(t, nil, "--help")
	page, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), filepath.FromSlash("docs/configuration.md")))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "\n## Commands\n")
	if !ok {
		t.Fatal("docs/configuration.md has no \"## Commands\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	_, cmds, _ := strings.Cut(help, "COMMANDS:")
	cmds, _, _ = strings.Cut(cmds, "GLOBAL OPTIONS:")
	for _, line := range strings.Split(cmds, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(line, "   ") || strings.HasPrefix(line, "    ") {
			continue
		}
		if name := strings.TrimSuffix(f[0], ","); name != "help" && !strings.Contains(table, "`speculapro "+name) && !strings.Contains(table, "`"+name+"`") {
			t.Errorf("the command table of docs/configuration.md does not list `speculapro %s`", name)
		}
	}

	// Go stamps VCS information only where .git is a directory: a `git
	// worktree` (whose .git is a file) is built from a clone of its commit.
	src := testenv.RepoRoot(t)
	if st, err := os.Stat(filepath.Join(src, ".git")); err != nil || !st.IsDir() {
		clone := t.TempDir()
		if out, err := exec.Command("git", "clone", "-q", src, clone).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		src = clone
	}
	bin := filepath.Join(t.TempDir(), "speculapro")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/speculapro")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rev, err := exec.Command("git", "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "commit " + string(rev[:12]); !strings.Contains(string(out), want) || strings.Contains(string(out), "Date: unknown") {
		t.Errorf("go build's binary: --version says %q, want %q and a date", out, want)
	}
}
