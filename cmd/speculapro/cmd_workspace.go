package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
)

// workspaceTimeout bounds each command: an admin step must not hang on a
// database that does not answer.
const workspaceTimeout = 30 * time.Second

// errNoWorkspace: apikey create named a workspace that does not exist (or is
// not active); row-level security makes both look the same.
var errNoWorkspace = errors.New("no such workspace")

// workspaceAction parses --workspace and runs fn bounded by
// workspaceTimeout, for the commands that act on one workspace (apikey,
// webhook); cmd ("apikey create") names the command in a flag error.
func workspaceAction(c *cli.Context, cmd string, fn func(context.Context, event.UUID) error) error {
	ws, err := event.ParseUUID(c.String("workspace"))
	if err != nil {
		return fmt.Errorf("%s: --workspace: %w", cmd, err)
	}
	ctx, cancel := context.WithTimeout(c.Context, workspaceTimeout)
	defer cancel()
	return fn(ctx, ws)
}

// workspaceCommand creates a workspace and its first API key, and changes
// a workspace's settings.
func workspaceCommand() *cli.Command {
	return &cli.Command{
		Name:  "workspace",
		Usage: "Manage workspaces (tenants)",
		Subcommands: []*cli.Command{{
			Name:  "create",
			Usage: "Create a workspace and its first API key; the key is printed once",
			Description: "Connects as SP_DB_URL (the speculapro_app role; row-level security applies) and prints\n" +
				"workspace_id=…, api_key=… and key_prefix=…. Only a hash of the key is stored: copy it now.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "name", Usage: "the workspace's display name", Required: true},
			},
			Action: func(c *cli.Context) error {
				ctx, cancel := context.WithTimeout(c.Context, workspaceTimeout)
				defer cancel()
				return runWorkspaceCreate(ctx, c.App.Writer, config.DBURL.Value(), c.String("name"))
			},
		}, workspaceSetCommand()},
	}
}

func runWorkspaceCreate(ctx context.Context, stdout io.Writer, dbURL, name string) error {
	name = strings.TrimSpace(name)
	if name == "" {
		return errors.New("workspace create: --name is empty")
	}
	ws, err := randomUUID()
	if err != nil {
		return fmt.Errorf("workspace create: %w", err)
	}
	key, err := apikey.New()
	if err != nil {
		return fmt.Errorf("workspace create: %w", err)
	}
	err = inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO speculapro.workspaces (id, name) VALUES ($1, $2)`, ws, name); err != nil {
			return fmt.Errorf("inserting workspace: %w", err)
		}
		return insertKey(ctx, tx, ws, "first key", key, apikey.Scopes(apikey.ScopeIngest|apikey.ScopeDecide))
	})
	if err != nil {
		return fmt.Errorf("workspace create: %w", err)
	}
	fmt.Fprintf(stdout, "workspace_id=%s\napi_key=%s\nkey_prefix=%s\n", ws, key.Secret, key.Display)
	return nil
}

// inWorkspace runs fn in one transaction of the app role bound to ws by
// row-level security.
func inWorkspace(ctx context.Context, dbURL string, ws event.UUID, fn func(pgx.Tx) error) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL (SP_DB_URL): %w", err)
	}
	defer conn.Close(context.Background())
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String()); err != nil {
			return fmt.Errorf("binding the session to workspace %s: %w", ws, err)
		}
		return fn(tx)
	})
}

func insertKey(ctx context.Context, tx pgx.Tx, ws event.UUID, name string, key apikey.Key, scopes apikey.Scopes) error {
	if _, err := tx.Exec(ctx,
		`INSERT INTO speculapro.api_keys (workspace_id, name, key_prefix, key_hash, scopes) VALUES ($1, $2, $3, $4, $5)`,
		ws, name, key.Display, key.Hash, scopes.Names()); err != nil {
		return fmt.Errorf("inserting API key %s: %w", key.Display, err)
	}
	return nil
}

// randomUUID is a version 4 UUID: a workspace's ID has no natural key to
// derive it from.
func randomUUID() (event.UUID, error) {
	var u event.UUID
	if _, err := rand.Read(u[:]); err != nil {
		return u, fmt.Errorf("generating a workspace ID: %w", err)
	}
	u[6] = 0x40 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u, nil
}
