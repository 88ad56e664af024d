package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// devCommand is replaced by the issue that builds it.
func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "not built yet",
		Action: func(*cli.Context) error {
			return errors.New("dev: not built yet")
		},
	}
}
