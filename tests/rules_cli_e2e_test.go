package tests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// rulesFile writes a rule file into dir and returns its path.
func rulesFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const rulesCLIFile = `rules:
  - name: big_out
    severity: high
    score: 40
    expression: event.direction == "out" && event.amount >= %AMOUNT%
    tests:
      - { name: big, event: { direction: out, amount: "9000" }, expect: hit }
      - { name: small, event: { direction: out, amount: "10" }, expect: no_hit }
  - name: with_hits
    expression: event.amount >= 1
    tests:
      - { name: any, event: { amount: "1" }, expect: hit }
  - name: without_hits
    expression: event.amount >= 2
    tests:
      - { name: any, event: { amount: "2" }, expect: hit }
`

// TestRulesCLI drives rules test, apply (dry run, create, unchanged, update,
// prune) and list as an operator would, against a fresh database as the app
// role.
func TestRulesCLI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	env := map[string]string{"SP_DB_URL": db.AppURL}
	run := func(wantCode int, args ...string) string {
		t.Helper()
		stdout, stderr, code := runBin(t, env, args...)
		if code != wantCode {
			t.Fatalf("speculapro %s: exit code %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout + stderr
	}

	out := run(0, "workspace", "create", "--name", "rules e2e")
	m := regexp.MustCompile(`workspace_id=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("workspace create printed no workspace_id:\n%s", out)
	}
	ws := m[1]

	// The starter pack's tests pass, and it applies whole.
	pack, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "config/rules/*.yaml"))
	if err != nil || len(pack) == 0 {
		t.Fatalf("no starter pack: %v", err)
	}
	if out := run(0, append([]string{"rules", "test"}, pack...)...); !strings.Contains(out, " 0 failed") || strings.Contains(out, "FAIL") {
		t.Fatalf("rules test on the starter pack:\n%s", out)
	}
	out = run(0, append(append([]string{"rules", "apply"}, pack...), "--workspace", ws, "--dry-run")...)
	if !strings.Contains(out, "created large_amount_to_new_counterparty v1") || !strings.Contains(out, "dry run: nothing written") {
		t.Fatalf("dry run:\n%s", out)
	}
	if out := run(0, "rules", "list", "--workspace", ws); strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("a dry run wrote rules:\n%s", out)
	}
	out = run(0, append(append([]string{"rules", "apply"}, pack...), "--workspace", ws)...)
	created := strings.Count(out, "created ")
	if created < 12 {
		t.Fatalf("applying the starter pack created %d rules:\n%s", created, out)
	}
	out = run(0, append([]string{"rules", "apply", "--workspace", ws}, pack...)...)
	if strings.Count(out, "unchanged ") != created || strings.Contains(out, "created") || strings.Contains(out, "updated") {
		t.Fatalf("applying the same pack again:\n%s", out)
	}
	list := run(0, "rules", "list", "--workspace", ws)
	if !regexp.MustCompile(`(?m)^NAME\s+VERSION\s+MODE\s+APPLIES_TO\s+ACTION\s+SEVERITY\s+SCORE\s+ENABLED$`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^large_amount_to_new_counterparty\s+v1\s+live\s+transaction\s+review\s+high\s+40\s+true$`).MatchString(list) ||
		!regexp.MustCompile(`(?m)^repeated_failed_otp\s+v1\s+live\s+account_event\s+alert\s+medium\s+20\s+true$`).MatchString(list) {
		t.Fatalf("rules list:\n%s", list)
	}

	// Our own file: update one rule, then prune the pack and one rule with a hit.
	dir := t.TempDir()
	file := rulesFile(t, dir, "mine.yaml", strings.ReplaceAll(rulesCLIFile, "%AMOUNT%", "5000"))
	out = run(0, "rules", "apply", file, "--workspace", ws)
	for _, want := range []string{"created big_out v1", "created with_hits v1", "created without_hits v1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply lacks %q:\n%s", want, out)
		}
	}
	rulesFile(t, dir, "mine.yaml", strings.ReplaceAll(rulesCLIFile, "%AMOUNT%", "8000"))
	out = run(0, "rules", "apply", file, "--workspace", ws)
	if !strings.Contains(out, "updated big_out v2") || !strings.Contains(out, "unchanged with_hits v1") {
		t.Fatalf("apply after an edit:\n%s", out)
	}

	super := db.Connect(t, db.SuperuserURL)
	if _, err := super.Exec(ctx, `INSERT INTO speculapro.rule_hits (workspace_id, rule_id, rule_version, event_id, event_occurred_at)
SELECT workspace_id, id, version, gen_random_uuid(), now() FROM speculapro.rules WHERE workspace_id = $1::uuid AND name IN ('with_hits', 'large_amount_to_new_counterparty')`, ws); err != nil {
		t.Fatal(err)
	}
	only := rulesFile(t, dir, "only.yaml", "rules:\n  - name: big_out\n    severity: high\n    score: 40\n    expression: event.direction == \"out\" && event.amount >= 8000\n    tests:\n      - { name: big, event: { direction: out, amount: \"9000\" }, expect: hit }\n")
	out = run(0, "rules", "apply", only, "--workspace", ws, "--prune")
	for _, want := range []string{"unchanged big_out v2", "disabled with_hits", "deleted without_hits", "disabled large_amount_to_new_counterparty", "deleted velocity_count_1h"} {
		if !strings.Contains(out, want) {
			t.Fatalf("prune lacks %q:\n%s", want, out)
		}
	}
	list = run(0, "rules", "list", "--workspace", ws)
	if !regexp.MustCompile(`(?m)^with_hits\s+v2\s+live\s+transaction\s+alert\s+medium\s+0\s+false$`).MatchString(list) || strings.Contains(list, "without_hits") {
		t.Fatalf("rules list after prune:\n%s", list)
	}

	// A file that does not compile is refused with its position; nothing is written.
	bad := rulesFile(t, dir, "bad.yaml", "rules:\n  - name: big_out\n    expression: |\n      event.amount >= 1 &&\n        features.account.out_count_1h >== 3\n")
	out = run(1, "rules", "apply", only, bad, "--workspace", ws)
	if !strings.Contains(out, bad+":5:41: rule \"big_out\"") || !strings.Contains(out, "nothing written") {
		t.Fatalf("a bad file:\n%s", out)
	}
	if after := run(0, "rules", "list", "--workspace", ws); after != list {
		t.Fatalf("a refused apply changed the rules:\n%s", after)
	}

	// A failing case and a rule without tests fail rules test.
	failing := rulesFile(t, dir, "failing.yaml", "rules:\n  - name: a\n    expression: event.amount > 1\n    tests:\n      - { name: wrong, event: { amount: \"0.5\" }, expect: hit }\n  - name: b\n    expression: \"true\"\n")
	out = run(1, "rules", "test", failing)
	if !strings.Contains(out, "FAIL a: wrong") || !strings.Contains(out, "FAIL "+failing+":6: b: rule has no tests") {
		t.Fatalf("rules test on failing cases:\n%s", out)
	}

	// An unknown workspace is refused, not created.
	out = run(1, "rules", "apply", only, "--workspace", "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	if !strings.Contains(out, "no such active workspace") {
		t.Fatalf("unknown workspace:\n%s", out)
	}
}
