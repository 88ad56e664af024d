package backtest

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Formats a report is written in.
var Formats = []string{"table", "json", "csv"}

// Write writes rep to w in format (one of Formats).
func Write(w io.Writer, rep *Report, format string) error {
	switch format {
	case "table":
		return writeTable(w, rep)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		return writeCSV(w, rep)
	}
	return fmt.Errorf("unknown format %q: want one of %s", format, strings.Join(Formats, ", "))
}

func writeTable(w io.Writer, rep *Report) error {
	fmt.Fprintf(w, "workspace %s, %s to %s: %d events evaluated (%d replayed from %s), %d accounts in the workspace, %s\n\n",
		rep.Workspace, rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339), rep.Events, rep.Replayed,
		rep.From.UTC().Truncate(24*time.Hour).Add(-Warmup).Format(time.DateOnly), rep.Accounts,
		rep.Elapsed.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tRULE\tMODE\tHITS\tACCOUNTS\tCUSTOMERS\tALERTS\tOVERLAP\tNEW\tERRORS\tSTORED")
	for _, r := range rep.Rules {
		stored := "-"
		if r.Source == SourceWorkspace {
			stored = strconv.FormatInt(r.Stored, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Source, ruleLabel(r), r.Mode, r.Hits,
			r.Accounts, r.Customers, r.Alerts, r.Overlap, r.New, r.Errors, stored)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nhits per day:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	days := rep.days()
	fmt.Fprintf(tw, "SOURCE\tRULE\t%s\n", strings.Join(days, "\t"))
	for _, r := range rep.Rules {
		by := map[string]int64{}
		for _, d := range r.PerDay {
			by[d.Day] = d.Hits
		}
		cells := make([]string, len(days))
		for i, d := range days {
			cells[i] = strconv.FormatInt(by[d], 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Source, ruleLabel(r), strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeSamples(w, rep)
}

// writeSamples lists the hits kept by --explain with what each rule read.
func writeSamples(w io.Writer, rep *Report) error {
	for _, r := range rep.Rules {
		if len(r.Samples) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s %s, %d of %d hits:\n", r.Source, ruleLabel(r), len(r.Samples), r.Hits)
		for _, s := range r.Samples {
			keys := make([]string, 0, len(s.Reads))
			for k := range s.Reads {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, len(keys))
			for i, k := range keys {
				v, _ := json.Marshal(s.Reads[k])
				parts[i] = k + "=" + string(v)
			}
			fmt.Fprintf(w, "  %s %s %s  %s\n", s.OccurredAt.Format(time.RFC3339), s.ExternalID, s.EventID, strings.Join(parts, " "))
		}
	}
	return nil
}

func ruleLabel(r *RuleResult) string {
	if r.Version > 0 {
		return r.Name + " v" + strconv.Itoa(r.Version)
	}
	return r.Name
}

// days are the days any rule hit, in order.
func (rep *Report) days() []string {
	var days []string
	for _, r := range rep.Rules {
		for _, d := range r.PerDay {
			days = append(days, d.Day)
		}
	}
	slices.Sort(days)
	return slices.Compact(days)
}

func writeCSV(w io.Writer, rep *Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"source", "rule", "version", "mode", "applies_to", "hits", "accounts", "customers", "alerts",
		"overlap", "new", "errors", "stored", "hits_per_day"})
	for _, r := range rep.Rules {
		days := make([]string, len(r.PerDay))
		for i, d := range r.PerDay {
			days[i] = d.Day + ":" + strconv.FormatInt(d.Hits, 10)
		}
		i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
		_ = cw.Write([]string{r.Source, r.Name, strconv.Itoa(r.Version), r.Mode, string(r.AppliesTo), i64(r.Hits),
			strconv.Itoa(r.Accounts), strconv.Itoa(r.Customers), i64(r.Alerts), i64(r.Overlap), i64(r.New),
			i64(r.Errors), i64(r.Stored), strings.Join(days, ";")})
	}
	cw.Flush()
	return cw.Error()
}
