package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/dbmigrate"
)

const (
	migrateFlagBootstrap    = "bootstrap"
	migrateFlagSuperuserURL = "superuser-url"
)

// migrateCommand applies the embedded migrations as speculapro_owner
// (SP_DB_OWNER_URL). With --bootstrap it first creates the roles, the
// database and the schema with a superuser URL.
func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "Apply database migrations as speculapro_owner (first time: --bootstrap)",
		Description: `Applies every migration not yet applied, in order, each in its own transaction,
as the role of SP_DB_OWNER_URL, which must be speculapro_owner. Prints "applied <file>"
for each, nothing when the database is up to date, and makes sure the monthly
partitions from last month to three months ahead exist.

--bootstrap (once per installation) first connects with SP_DB_SUPERUSER_URL (or
--superuser-url, a superuser URL naming an existing database such as postgres) and
creates or updates the roles speculapro_owner, speculapro_app and speculapro_system
with the passwords of SP_DB_OWNER_URL, SP_DB_URL and SP_DB_SYSTEM_URL (unset: the
local-stack password speculapro_system), then the database named by SP_DB_OWNER_URL,
the schema speculapro and each role's search_path (speculapro, public). It prints
"created role …" and "created database …" for what did not exist yet.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{
				Name:  migrateFlagBootstrap,
				Usage: "create the roles, the database and the schema with a superuser URL before migrating",
			},
			&cli.StringFlag{
				Name:  migrateFlagSuperuserURL,
				Usage: "superuser URL for --bootstrap (default: SP_DB_SUPERUSER_URL)",
			},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			say := func(line string) { fmt.Fprintln(c.App.Writer, line) }
			if err := runMigrate(ctx, c.Bool(migrateFlagBootstrap), c.String(migrateFlagSuperuserURL), say); err != nil {
				return fmt.Errorf("error: %w", err)
			}
			return nil
		},
	}
}

func runMigrate(ctx context.Context, bootstrap bool, superuserURL string, say func(string)) error {
	if bootstrap {
		if superuserURL == "" {
			superuserURL = config.DBSuperuserURL.Value()
		}
		cfg, err := dbmigrate.BootstrapConfigFromSettings(superuserURL)
		if err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		if err := dbmigrate.Bootstrap(ctx, cfg, say); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}

	conn, err := pgx.Connect(ctx, config.DBOwnerURL.Value())
	if err != nil {
		return fmt.Errorf("migrate: connecting with %s: %w", config.DBOwnerURL.Name, err)
	}
	defer conn.Close(context.Background())
	if _, err := dbmigrate.Migrate(ctx, conn, time.Now(), func(name string) { say("applied " + name) }); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
