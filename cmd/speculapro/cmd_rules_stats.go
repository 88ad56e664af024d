package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rulestats"
)

// rulesStatsCommand reports how each rule version of a workspace performs.
func rulesStatsCommand(workspace cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "Per rule and version: events evaluated, hits, hit rate, alerts, accounts, outcomes, precision, mode, first and last hit",
		Description: "Connects as SP_DB_URL (the speculapro_app role, bound to --workspace by row-level security) and\n" +
			"only reads. Events evaluated are the stream's hourly counts, so --since is taken to its hour for them;\n" +
			"hits, accounts and alerts count what the stream stored since then. An alert's outcome is its case's\n" +
			"disposition once the case is closed (true positive, false positive, inconclusive); precision is true\n" +
			"positives over true and false positives (\"-\" while there is none).",
		Flags: []cli.Flag{
			workspace,
			&cli.StringFlag{Name: "since", Value: "7d", Usage: "how far back: a number of days (7d) or a duration (36h)"},
			&cli.StringFlag{Name: "format", Value: rulestats.FormatTable, Usage: "table, json or csv"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return fmt.Errorf("rules stats: unexpected argument %q", c.Args().First())
			}
			ws, err := event.ParseUUID(c.String("workspace"))
			if c.String("workspace") == "" {
				return fmt.Errorf("rules stats: --workspace is required")
			}
			if err != nil {
				return fmt.Errorf("rules stats: --workspace: %w", err)
			}
			since, err := rulestats.ParseSince(c.String("since"), time.Now())
			if err != nil {
				return fmt.Errorf("rules stats: %w", err)
			}
			format := c.String("format")
			if !slices.Contains(rulestats.Formats, format) {
				return fmt.Errorf("rules stats: --format %q: want %s", format, strings.Join(rulestats.Formats, ", "))
			}
			ctx, cancel := context.WithTimeout(c.Context, rulesTimeout)
			defer cancel()
			return runRulesStats(ctx, c.App.Writer, config.DBURL.Value(), ws, since, format)
		},
	}
}

func runRulesStats(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID, since time.Time, format string) error {
	var rep rulestats.Report
	err := inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		// Read only: statistics never change what they measure.
		if _, err := tx.Exec(ctx, `SET TRANSACTION READ ONLY`); err != nil {
			return fmt.Errorf("making the transaction read-only: %w", err)
		}
		var err error
		rep, err = rulestats.Read(ctx, tx, ws, since)
		return err
	})
	if err != nil {
		return fmt.Errorf("rules stats: %w", err)
	}
	return rulestats.Write(stdout, rep, format)
}
