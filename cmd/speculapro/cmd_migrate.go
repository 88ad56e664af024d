package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// migrateCommand is replaced by the issue that builds it.
func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "not built yet",
		Action: func(*cli.Context) error {
			return errors.New("migrate: not built yet")
		},
	}
}
