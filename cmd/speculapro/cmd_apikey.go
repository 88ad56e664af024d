package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
)

// Sentinel errors of apikey revoke.
var (
	// errNoSuchKey: no key of the workspace has that prefix or ID.
	errNoSuchKey = errors.New("no such API key in the workspace")
	// errAmbiguousKey: several keys share the prefix; name one by --id.
	errAmbiguousKey = errors.New("several API keys have that prefix; name one with --id")
)

// apikeyCommand creates, lists and revokes a workspace's API keys. Every
// subcommand connects as SP_DB_URL (speculapro_app) bound to the workspace by
// row-level security, so it sees that workspace's keys only.
func apikeyCommand() *cli.Command {
	wsFlag := &cli.StringFlag{Name: "workspace", Usage: "the workspace's ID", Required: true}
	return &cli.Command{
		Name:  "apikey",
		Usage: "Manage API keys: create, list, revoke",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "Create an API key for a workspace; the key is printed once",
			Description: "Connects as SP_DB_URL and prints api_key=…, key_prefix=… and scopes=…. Only a hash of the\n" +
				"key is stored: copy it now. --scopes names what the key may do: ingest (the ingest API),\n" +
				"decide (the decision API), cases (the case API); a key without an API's scope gets 403 there.",
			Flags: []cli.Flag{wsFlag,
				&cli.StringFlag{Name: "name", Usage: "what the key is for, to tell keys apart", Value: "api key"},
				&cli.StringFlag{Name: "scopes", Usage: "comma-separated: ingest, decide, cases", Value: apikey.DefaultScopes},
			},
			Action: func(c *cli.Context) error {
				scopes, err := apikey.ParseScopes(c.String("scopes"))
				if err != nil {
					return fmt.Errorf("apikey create: --scopes: %w", err)
				}
				return workspaceAction(c, "apikey create", func(ctx context.Context, ws event.UUID) error {
					return runAPIKeyCreate(ctx, c.App.Writer, config.DBURL.Value(), ws, c.String("name"), scopes)
				})
			},
		}, {
			Name:        "list",
			Usage:       "List a workspace's API keys (prefix, name, scopes, created, last used, revoked); never the keys",
			Description: "Connects as SP_DB_URL. Only the non-secret key_prefix of each key is shown.",
			Flags:       []cli.Flag{wsFlag},
			Action: func(c *cli.Context) error {
				return workspaceAction(c, "apikey list", func(ctx context.Context, ws event.UUID) error {
					return runAPIKeyList(ctx, c.App.Writer, config.DBURL.Value(), ws)
				})
			},
		}, {
			Name:  "revoke",
			Usage: "Revoke an API key by its prefix (spk_…) or ID; requests with it get 401 within a minute",
			Description: "Connects as SP_DB_URL. A running ingest API caches a valid key for up to a minute, so a\n" +
				"revoked key stops working at the latest a minute later on every process.",
			Flags: []cli.Flag{wsFlag,
				&cli.StringFlag{Name: "prefix", Usage: "the key_prefix `apikey list` shows (spk_…)"},
				&cli.StringFlag{Name: "id", Usage: "the key's ID, when several keys share a prefix"},
			},
			Action: func(c *cli.Context) error {
				return workspaceAction(c, "apikey revoke", func(ctx context.Context, ws event.UUID) error {
					return runAPIKeyRevoke(ctx, c.App.Writer, config.DBURL.Value(), ws, c.String("prefix"), c.String("id"))
				})
			},
		}},
	}
}

func runAPIKeyCreate(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID, name string, scopes apikey.Scopes) error {
	key, err := apikey.New()
	if err != nil {
		return fmt.Errorf("apikey create: %w", err)
	}
	err = inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		var n int
		// RLS shows the workspace row only to a session naming it; absent
		// means no such workspace, which the key's foreign key would also
		// catch, less readably.
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM speculapro.workspaces WHERE id = $1 AND status = 'active'`, ws).Scan(&n); err != nil {
			return fmt.Errorf("looking up workspace %s: %w", ws, err)
		}
		if n == 0 {
			return fmt.Errorf("workspace %s: %w", ws, errNoWorkspace)
		}
		return insertKey(ctx, tx, ws, name, key, scopes)
	})
	if err != nil {
		return fmt.Errorf("apikey create: %w", err)
	}
	fmt.Fprintf(stdout, "api_key=%s\nkey_prefix=%s\nscopes=%s\n", key.Secret, key.Display, strings.Join(scopes.Names(), ","))
	return nil
}

func runAPIKeyList(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID) error {
	type row struct {
		id                event.UUID
		prefix, name      string
		scopes            []string
		created           time.Time
		lastUsed, revoked *time.Time
	}
	var rows []row
	err := inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, `SELECT id, key_prefix, name, scopes, created_at, last_used_at, revoked_at
			FROM speculapro.api_keys WHERE workspace_id = $1 ORDER BY created_at, id`, ws)
		if err != nil {
			return fmt.Errorf("listing the keys of workspace %s: %w", ws, err)
		}
		defer rs.Close()
		for rs.Next() {
			var r row
			if err := rs.Scan(&r.id, &r.prefix, &r.name, &r.scopes, &r.created, &r.lastUsed, &r.revoked); err != nil {
				return fmt.Errorf("reading an API key row: %w", err)
			}
			rows = append(rows, r)
		}
		return rs.Err()
	})
	if err != nil {
		return fmt.Errorf("apikey list: %w", err)
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY_PREFIX\tID\tNAME\tSCOPES\tCREATED\tLAST_USED\tREVOKED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.prefix, r.id, r.name, strings.Join(r.scopes, ","), when(&r.created), when(r.lastUsed), when(r.revoked))
	}
	return tw.Flush()
}

func runAPIKeyRevoke(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID, prefix, id string) error {
	prefix, id = strings.TrimSpace(prefix), strings.TrimSpace(id)
	if (prefix == "") == (id == "") {
		return errors.New("apikey revoke: give exactly one of --prefix and --id")
	}
	var keyID *event.UUID
	if id != "" {
		u, err := event.ParseUUID(id)
		if err != nil {
			return fmt.Errorf("apikey revoke: --id: %w", err)
		}
		keyID = &u
	}
	var shown, name string
	var already bool
	err := inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, `SELECT id, key_prefix, name, revoked_at IS NOT NULL FROM speculapro.api_keys
			WHERE workspace_id = $1 AND (id = $2 OR key_prefix = $3) FOR UPDATE`, ws, keyID, prefix)
		if err != nil {
			return fmt.Errorf("looking up the key: %w", err)
		}
		var found []event.UUID
		for rs.Next() {
			var k event.UUID
			if err := rs.Scan(&k, &shown, &name, &already); err != nil {
				rs.Close()
				return fmt.Errorf("reading the key: %w", err)
			}
			found = append(found, k)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return fmt.Errorf("looking up the key: %w", err)
		}
		switch {
		case len(found) == 0:
			return errNoSuchKey
		case len(found) > 1:
			return errAmbiguousKey
		case already:
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE speculapro.api_keys SET revoked_at = now() WHERE id = $1`, found[0]); err != nil {
			return fmt.Errorf("revoking the key: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("apikey revoke: %w", err)
	}
	if already {
		fmt.Fprintf(stdout, "already revoked %s (%s)\n", shown, name)
		return nil
	}
	fmt.Fprintf(stdout, "revoked %s (%s); running ingest APIs refuse it within a minute\n", shown, name)
	return nil
}
