package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// The block between docs/benchmarks.md's bench-summary markers is written by
// `make bench-summary` from the rows benchmarks report, and must be exactly
// what that target writes: the rows read back from the committed table,
// written by the target into a copy of the page (with the committed
// header's BENCH, date and machine), give the page byte for byte. So notes
// added inside the block by hand, a table in a format the target no longer
// writes, or a target that loses or garbles the rest of the page fail here;
// regenerate with make bench (or make bench-summary after the benchmarks you
// ran).
func TestBenchmarkTableIsWhatBenchSummaryWrites(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs/benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- bench-summary:begin -->\n", "<!-- bench-summary:end -->\n"
	_, block, ok := strings.Cut(string(page), begin)
	block, _, ok2 := strings.Cut(block, end)
	if !ok || !ok2 {
		t.Fatalf("docs/benchmarks.md lacks the lines %q and %q", begin, end)
	}
	header := regexp.MustCompile("(?m)^The benchmarks matching `(.*)`, table written (.*) on (.*) \\(PostgreSQL, Kafka and Redis on the same machine\\)\\.$").
		FindStringSubmatch(block)
	if header == nil {
		t.Fatalf("the benchmark table has no header line as make bench-summary writes it:\n%s", block)
	}
	var rows []string
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| Metric |") || strings.HasPrefix(line, "| --- |") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
		if len(cells) != 5 {
			t.Fatalf("a table row without 5 cells: %q", line)
		}
		rows = append(rows, strings.Join(cells, "\t"))
	}
	if len(rows) == 0 {
		t.Fatal("the benchmark table has no rows")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed to run the bench-summary target: %v", err)
	}
	dir := t.TempDir()
	tsv, doc := filepath.Join(dir, "rows.tsv"), filepath.Join(dir, "page")
	if err := os.WriteFile(tsv, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, page, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", root, "bench-summary",
		"BENCH_ROWS="+tsv, "BENCH_DOC="+doc, "BENCH="+header[1], "BENCH_WHEN="+header[2], "BENCH_MACHINE="+header[3])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make bench-summary: %v\n%s", err, out)
	}
	got, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, page) {
		t.Errorf("make bench-summary writes a different docs/benchmarks.md from the committed table's own rows: the block between the markers was edited by hand or the target changed; regenerate it with make bench")
	}
}
