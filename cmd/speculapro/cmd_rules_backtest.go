package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/backtest"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/procmem"
	"github.com/speculapro/speculapro/internal/rules"
)

// defaultBacktestMemory bounds a backtest's totals when --max-memory is not
// given: about 200,000 accounts with as many customers and counterparties.
const defaultBacktestMemory = "4GiB"

// rulesBacktestCommand is `rules backtest`.
func rulesBacktestCommand() *cli.Command {
	return &cli.Command{
		Name:      "backtest",
		Usage:     "Replay a workspace's stored history through the live feature code: what rules would have fired on",
		ArgsUsage: "<rule files…> --workspace <id> --from <time> --to <time>",
		Description: "Connects as SP_DB_URL (the speculapro_app role, bound to --workspace by row-level security) in one\n" +
			"read-only transaction and writes nothing, in PostgreSQL or Redis. Replays the workspace's transactions\n" +
			"and account events from 31 days before --from (the longest window) in the order the stream applied\n" +
			"them, computes their running totals in memory with the stream's code, and evaluates the files' rules\n" +
			"and the workspace's enabled rules (live and shadow) on every event whose occurred_at is in [--from, --to).\n" +
			"Prints per rule: its mode, hits, distinct accounts and customers hit, alerts it would raise (none for a\n" +
			"shadow rule), how many of those events the live rules alerted on already (overlap) and how many would be\n" +
			"new, errors, the workspace rules' stored hits, and hits per day. --from and --to take RFC 3339 times or\n" +
			"dates (UTC midnight). Ctrl-C stops it.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "the workspace's ID (required)"},
			&cli.StringFlag{Name: "from", Usage: "start of the period, RFC 3339 or YYYY-MM-DD (required)"},
			&cli.StringFlag{Name: "to", Usage: "end of the period, exclusive (required)"},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "table, json or csv"},
			&cli.IntFlag{Name: "explain", Usage: "show up to N hits per rule with the values that made it fire"},
			&cli.StringFlag{Name: "max-memory", Value: defaultBacktestMemory, Usage: "refuse a history whose totals need more memory than this"},
			&cli.StringFlag{Name: "hits", Usage: "also write every hit to this CSV file (source, rule, event_id, occurred_at)"},
		},
		Action: func(c *cli.Context) error {
			a, err := backtestArgs(c)
			if err != nil {
				return fmt.Errorf("rules backtest: %w", err)
			}
			return runRulesBacktest(c.Context, c.App.Writer, c.App.ErrWriter, config.DBURL.Value(), a)
		},
	}
}

// backtestFlags are the flags `rules backtest` reads wherever they are
// (the flag parser stops at the first file name).
var backtestFlags = []string{"workspace", "from", "to", "format", "explain", "max-memory", "hits"}

// btArgs is what `rules backtest` was given.
type btArgs struct {
	files     []string
	opts      backtest.Options
	format    string
	hitsFile  string
	maxMemory string
}

// backtestArgs reads the files and the flags, before or after them.
func backtestArgs(c *cli.Context) (btArgs, error) {
	vals := map[string]string{}
	for _, f := range backtestFlags {
		vals[f] = c.String(f)
	}
	var files []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") {
			files = append(files, args[i])
			continue
		}
		if !slices.Contains(backtestFlags, name) {
			return btArgs{}, fmt.Errorf("unknown flag %s", args[i])
		}
		if !hasValue {
			if i+1 == len(args) {
				return btArgs{}, fmt.Errorf("--%s needs a value", name)
			}
			i++
			value = args[i]
		}
		vals[name] = value
	}
	return parseBacktestArgs(files, vals)
}

func parseBacktestArgs(files []string, vals map[string]string) (btArgs, error) {
	a := btArgs{files: files, format: vals["format"], hitsFile: vals["hits"], maxMemory: vals["max-memory"]}
	if len(files) == 0 {
		return a, errors.New("no rule files given")
	}
	if !slices.Contains(backtest.Formats, a.format) {
		return a, fmt.Errorf("--format %q: want one of %s", a.format, strings.Join(backtest.Formats, ", "))
	}
	for _, req := range []string{"workspace", "from", "to"} {
		if vals[req] == "" {
			return a, fmt.Errorf("--%s is required", req)
		}
	}
	var err error
	if a.opts.Workspace, err = event.ParseUUID(vals["workspace"]); err != nil {
		return a, fmt.Errorf("--workspace: %w", err)
	}
	if a.opts.From, err = parseWhen(vals["from"]); err != nil {
		return a, fmt.Errorf("--from: %w", err)
	}
	if a.opts.To, err = parseWhen(vals["to"]); err != nil {
		return a, fmt.Errorf("--to: %w", err)
	}
	if !a.opts.From.Before(a.opts.To) {
		return a, errors.New("--from must be before --to")
	}
	if s := vals["explain"]; s != "" {
		if a.opts.Explain, err = strconv.Atoi(s); err != nil || a.opts.Explain < 0 {
			return a, fmt.Errorf("--explain %q: want a count", s)
		}
	}
	n, err := humanize.ParseBytes(a.maxMemory)
	if err != nil {
		return a, fmt.Errorf("--max-memory %q: %w", a.maxMemory, err)
	}
	a.opts.MaxMemory = int64(n)
	return a, nil
}

// parseWhen reads an RFC 3339 time or a date (its UTC midnight).
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a date (YYYY-MM-DD)", s)
	}
	return t, nil
}

func runRulesBacktest(ctx context.Context, stdout, stderr io.Writer, dbURL string, a btArgs) error {
	// Ctrl-C cancels the replay: the query stops and the read-only
	// transaction rolls back.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The totals of a large workspace are hundreds of megabytes of live
	// heap: under the limit every command starts with, the collector
	// would run nearly all the time. --max-memory bounds them instead.
	procmem.Request(procmem.Settings{Limit: a.opts.MaxMemory, LiveHeapHeadroom: 1.5})
	defs, err := rules.ParseFiles(a.files...)
	if err != nil {
		return fmt.Errorf("rules backtest:\n%w", err)
	}
	for i := range defs {
		defs[i].Rule.WorkspaceID = a.opts.Workspace
		a.opts.Rules = append(a.opts.Rules, defs[i].Rule)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("rules backtest: connecting to PostgreSQL (SP_DB_URL): %w", err)
	}
	defer conn.Close(context.Background())
	if a.hitsFile != "" {
		f, err := os.Create(a.hitsFile)
		if err != nil {
			return fmt.Errorf("rules backtest: --hits: %w", err)
		}
		defer f.Close()
		cw := csv.NewWriter(f)
		defer cw.Flush()
		_ = cw.Write([]string{"source", "rule", "event_id", "occurred_at"})
		a.opts.Hit = func(r *backtest.RuleResult, ev *event.Envelope) {
			_ = cw.Write([]string{r.Source, r.Name, ev.ID.String(), ev.OccurredAt.Format(time.RFC3339Nano)})
		}
	}
	bar := newProgressLine(stderr)
	a.opts.Progress = bar.update
	rep, err := backtest.Run(ctx, conn, a.opts)
	bar.end()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("rules backtest: stopped, nothing changed: %w", ctx.Err())
		}
		return fmt.Errorf("rules backtest: %w", err)
	}
	return backtest.Write(stdout, rep, a.format)
}

// progressLine shows a replay's progress on stderr: on a terminal one line
// redrawn in place (a bar, events done, events/s, time left), otherwise a
// plain line every 10 seconds.
type progressLine struct {
	w        io.Writer
	terminal bool
	last     time.Time
	drawn    bool
}

func newProgressLine(w io.Writer) *progressLine {
	p := &progressLine{w: w, last: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progressLine) update(pr backtest.Progress) {
	every := 10 * time.Second
	if p.terminal {
		every = 200 * time.Millisecond
	}
	if time.Since(p.last) < every && pr.Done < pr.Total {
		return
	}
	p.last = time.Now()
	rate := float64(pr.Done) / max(pr.Elapsed.Seconds(), 1e-3)
	left := time.Duration(float64(pr.Total-pr.Done) / max(rate, 1) * float64(time.Second)).Round(time.Second)
	frac := float64(pr.Done) / float64(max(pr.Total, 1))
	if !p.terminal {
		fmt.Fprintf(p.w, "backtest: %d of %d events (%.0f%%), %.0f events/s, %s left\n", pr.Done, pr.Total, 100*frac, rate, left)
		return
	}
	const width = 30
	full := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d events, %.0f events/s, %s left ", strings.Repeat("=", full),
		strings.Repeat(" ", width-full), pr.Done, pr.Total, rate, left)
	p.drawn = true
}

// end finishes the terminal's line.
func (p *progressLine) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
