package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// topicsCommand is replaced by the issue that builds it.
func topicsCommand() *cli.Command {
	return &cli.Command{
		Name:  "topics",
		Usage: "not built yet",
		Action: func(*cli.Context) error {
			return errors.New("topics: not built yet")
		},
	}
}
