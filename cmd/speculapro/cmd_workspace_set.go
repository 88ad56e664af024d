package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
)

// caseGroupings are the values of a workspace's case_grouping, as the
// database's CHECK constraint allows them: what a new alert's case is
// shared with.
var caseGroupings = []string{"customer", "account", "alert"}

// workspaceSetCommand changes a workspace's settings.
func workspaceSetCommand() *cli.Command {
	return &cli.Command{
		Name:  "set",
		Usage: "Change a workspace's settings and print them",
		Description: "Connects as SP_DB_URL (the speculapro_app role; row-level security applies) and prints the\n" +
			"workspace's settings after the change, e.g. case_grouping=account.\n\n" +
			"--case-grouping decides which open case a new alert joins: customer (the customer's; the account's\n" +
			"when the event names no customer), account (the account's; the customer's when it names no\n" +
			"account) or alert (a case of its own). It applies to alerts created from then on; open cases stay.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "the workspace's ID", Required: true},
			&cli.StringFlag{Name: "case-grouping", Usage: "customer, account or alert", Required: true},
		},
		Action: func(c *cli.Context) error {
			return workspaceAction(c, "workspace set", func(ctx context.Context, ws event.UUID) error {
				return runWorkspaceSet(ctx, c.App.Writer, config.DBURL.Value(), ws, c.String("case-grouping"))
			})
		},
	}
}

func runWorkspaceSet(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID, grouping string) error {
	grouping = strings.TrimSpace(grouping)
	if !slices.Contains(caseGroupings, grouping) {
		return fmt.Errorf("workspace set: --case-grouping %q: want one of %s", grouping, strings.Join(caseGroupings, ", "))
	}
	var got string
	err := inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
UPDATE speculapro.workspaces SET case_grouping = $2, updated_at = now() WHERE id = $1 RETURNING case_grouping`,
			ws, grouping).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoWorkspace
		}
		if err != nil {
			return fmt.Errorf("updating the workspace's case grouping: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("workspace set: %w", err)
	}
	fmt.Fprintf(stdout, "case_grouping=%s\n", got)
	return nil
}
