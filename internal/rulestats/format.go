package rulestats

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"
)

// Formats Write knows.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatCSV   = "csv"
)

// Formats lists them, for a flag's help and its check.
var Formats = []string{FormatTable, FormatJSON, FormatCSV}

// Write writes rep in format: an aligned table for people, JSON or CSV for
// programs. A figure that cannot be known (a rate without events evaluated,
// a precision without closed cases) is "-" in the table, null in JSON and
// empty in CSV.
func Write(w io.Writer, rep Report, format string) error {
	switch format {
	case FormatTable:
		return writeTable(w, rep)
	case FormatJSON:
		return writeJSON(w, rep)
	case FormatCSV:
		return writeCSV(w, rep)
	}
	return fmt.Errorf("unknown format %q: want table, json or csv", format)
}

var columns = []string{"rule", "version", "mode", "events_evaluated", "hits", "hits_per_1000", "alerts",
	"distinct_accounts", "true_positives", "false_positives", "inconclusive", "precision", "first_hit", "last_hit"}

// fields are r's columns as text; missing is what stands for a figure that
// cannot be known.
func fields(r Row, missing string) []string {
	number := func(f float64, digits int) string {
		if math.IsNaN(f) {
			return missing
		}
		return strconv.FormatFloat(f, 'f', digits, 64)
	}
	when := func(t *time.Time) string {
		if t == nil {
			return missing
		}
		return t.UTC().Format(time.RFC3339)
	}
	count := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []string{r.Rule, strconv.Itoa(r.Version), r.Mode, count(r.Evaluated), count(r.Hits), number(r.HitsPer1000(), 2),
		count(r.Alerts), count(r.Accounts), count(r.TruePositives), count(r.FalsePositives), count(r.Inconclusive),
		number(r.Precision(), 3), when(r.FirstHit), when(r.LastHit)}
}

func writeTable(w io.Writer, rep Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tVERSION\tMODE\tEVALUATED\tHITS\tPER_1000\tALERTS\tACCOUNTS\tTRUE_POS\tFALSE_POS\tINCONCLUSIVE\tPRECISION\tFIRST_HIT\tLAST_HIT")
	for _, r := range rep.Rows {
		f := fields(r, "-")
		f[1] = "v" + f[1]
		for i, s := range f {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, s)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(columns); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if err := cw.Write(fields(r, "")); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonRow is a Row with its derived figures, null when unknown.
type jsonRow struct {
	Row
	HitsPer1000 *float64 `json:"hits_per_1000"`
	Precision   *float64 `json:"precision"`
}

func writeJSON(w io.Writer, rep Report) error {
	known := func(f float64) *float64 {
		if math.IsNaN(f) {
			return nil
		}
		return &f
	}
	out := struct {
		Report
		Rows []jsonRow `json:"rules"`
	}{Report: rep, Rows: make([]jsonRow, 0, len(rep.Rows))}
	for _, r := range rep.Rows {
		out.Rows = append(out.Rows, jsonRow{Row: r, HitsPer1000: known(r.HitsPer1000()), Precision: known(r.Precision())})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
