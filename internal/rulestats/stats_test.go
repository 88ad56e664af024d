package rulestats_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/rulestats"
)

func TestReadReportsEachRuleVersion(t *testing.T) {
	db := newStatsDB(t)
	rep := read(t, db, time.Now().Add(-7*24*time.Hour))
	var got []string
	for _, r := range rep.Rows {
		got = append(got, strings.Join([]string{r.Rule, fmtInt(r.Version), r.Mode, fmtInt(r.Evaluated), fmtInt(r.Hits),
			fmtInt(r.Alerts), fmtInt(r.Accounts), fmtInt(r.TruePositives), fmtInt(r.FalsePositives), fmtInt(r.Inconclusive)}, " "))
	}
	want := []string{
		"big 2 live 4000 4 4 3 2 1 0",
		"big 1 live 500 1 1 1 0 0 1",
		"quiet 1 live 0 0 0 0 0 0 0",
		"watch 1 shadow 4000 2 0 1 0 0 0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	big := rep.Rows[0]
	if big.HitsPer1000() != 1 || big.Precision() < 0.666 || big.Precision() > 0.667 || big.FirstHit == nil ||
		!big.LastHit.After(*big.FirstHit) {
		t.Errorf("big v2: rate %v precision %v first %v last %v", big.HitsPer1000(), big.Precision(), big.FirstHit, big.LastHit)
	}

	// An inconclusive outcome says neither true nor false: big v1's
	// precision is unknown, not zero.
	if p := rep.Rows[1].Precision(); !math.IsNaN(p) {
		t.Errorf("big v1, one alert closed inconclusive: precision %v, want unknown", p)
	}

	// The table, JSON and CSV say the same; a figure that cannot be known
	// is "-", null and empty.
	var table, js, csv bytes.Buffer
	for f, w := range map[string]*bytes.Buffer{rulestats.FormatTable: &table, rulestats.FormatJSON: &js, rulestats.FormatCSV: &csv} {
		if err := rulestats.Write(w, rep, f); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(table.String(), "TRUE_POS  FALSE_POS  INCONCLUSIVE  PRECISION") || !strings.Contains(table.String(), "0.667") ||
		!strings.Contains(table.String(), "quiet  v1       live    0          0     -") {
		t.Errorf("table:\n%s", table.String())
	}
	var parsed struct {
		Rules []struct {
			Rule      string   `json:"rule"`
			Rate      *float64 `json:"hits_per_1000"`
			Precision *float64 `json:"precision"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil || len(parsed.Rules) != 4 || *parsed.Rules[0].Rate != 1 ||
		parsed.Rules[2].Rate != nil || parsed.Rules[1].Precision != nil || parsed.Rules[3].Precision != nil {
		t.Errorf("json (%v):\n%s", err, js.String())
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 5 ||
		!strings.HasPrefix(lines[0], "rule,version,mode,events_evaluated,hits,hits_per_1000,alerts,distinct_accounts,true_positives,false_positives,inconclusive,precision") ||
		!strings.HasPrefix(lines[1], "big,2,live,4000,4,1.00,4,3,2,1,0,0.667,") || lines[3] != "quiet,1,live,0,0,,0,0,0,0,0,,," {
		t.Errorf("csv:\n%s", csv.String())
	}

	// A day back: big v1's hit and count fall out of the window.
	rep = read(t, db, time.Now().Add(-24*time.Hour))
	if len(rep.Rows) != 3 || rep.Rows[1].Rule != "quiet" {
		t.Errorf("a day back: %+v", rep.Rows)
	}
}

// Precision follows the cases as analysts close and reopen them: a reopened
// case's alerts have no outcome until it is closed again, and a precision of
// zero (every outcome false) is shown as zero, not unknown.
func TestPrecisionFollowsClosingAndReopening(t *testing.T) {
	db := newStatsDB(t)
	since := time.Now().Add(-7 * 24 * time.Hour)
	exec(t, db.super, `UPDATE speculapro.cases SET status = 'open', disposition = NULL WHERE workspace_id = $1 AND title = 'tp'`, db.ws)
	big := read(t, db, since).Rows[0]
	if big.TruePositives != 0 || big.FalsePositives != 1 || big.Precision() != 0 {
		t.Fatalf("big v2 after reopening its true positives: %d TP %d FP precision %v, want 0, 1, 0",
			big.TruePositives, big.FalsePositives, big.Precision())
	}
	var table bytes.Buffer
	if err := rulestats.Write(&table, read(t, db, since), rulestats.FormatTable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), " 0.000 ") {
		t.Errorf("a precision of zero not shown as 0.000:\n%s", table.String())
	}
	exec(t, db.super, `UPDATE speculapro.cases SET status = 'closed', disposition = 'true_positive' WHERE workspace_id = $1 AND title = 'open'`, db.ws)
	if big = read(t, db, since).Rows[0]; big.TruePositives != 1 || big.FalsePositives != 1 || big.Precision() != 0.5 {
		t.Errorf("big v2 after closing its open case true positive: %d TP %d FP precision %v, want 1, 1, 0.5",
			big.TruePositives, big.FalsePositives, big.Precision())
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{"7d": now.AddDate(0, 0, -7), "36h": now.Add(-36 * time.Hour), "90m": now.Add(-90 * time.Minute)} {
		if got, err := rulestats.ParseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "7 d", "-1d", "0d", "1w", "-3h", "7d2h"} {
		if _, err := rulestats.ParseSince(bad, now); err == nil {
			t.Errorf("ParseSince(%q) accepted", bad)
		}
	}
}

func fmtInt[T int | int64](n T) string { return fmt.Sprint(n) }
