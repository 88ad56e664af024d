// Command speculapro is SpeculaPro's one binary: the Benthos engine with our
// plugins and our own subcommands (migrate, topics, dev).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/pgrole"
	_ "github.com/speculapro/speculapro/plugins/all"
)

// version and commit are set at build time with -ldflags by the Makefile.
var (
	version = "dev"
	commit  = "unknown"
	built   = "unknown"
)

func main() {
	code, err := service.RunCLIToCode(context.Background(),
		service.CLIOptSetBinaryName("speculapro"),
		service.CLIOptSetProductName("SpeculaPro"),
		service.CLIOptSetVersion(version+" (commit "+commit+")", built),
		service.CLIOptSetDocumentationURL("https://github.com/speculapro/speculapro"),
		// Log lines read as the spec quotes them (level=WARN msg="…" count=3):
		// the engine's own logger is off unless a config's logger section
		// asks for it, and every line goes through applog at SP_LOG_LEVEL.
		service.CLIOptSetMainSchemaFrom(func() *service.ConfigSchema {
			s := service.GlobalEnvironment().FullConfigSchema(version, built)
			s.SetFieldDefault("NONE", "logger", "level")
			// Loopback unless SP_HTTP_ADDR says otherwise, in every mode.
			s.SetFieldDefault(config.HTTPAddr.Value(), "http", "address")
			return s
		}),
		service.CLIOptAddTeeLogger(applog.New(os.Stdout, applog.ParseLevel(config.LogLevel.Value()))),
		service.CLIOptAddCommand(migrateCommand()),
		service.CLIOptAddCommand(topicsCommand()),
		service.CLIOptAddCommand(devCommand()),
		service.CLIOptAddCommand(loadgenCommand()),
		service.CLIOptAddCommand(workspaceCommand()),
		service.CLIOptAddCommand(apikeyCommand()),
		service.CLIOptAddCommand(rulesCommand()),
		service.CLIOptAddCommand(webhookCommand()),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, cliError(err))
	}
	if code != 0 {
		os.Exit(code)
	}
}

// cliError is the line printed for an error that stops the process. A start-up
// check the spec words exactly (a persist, stream or worker role that cannot
// bypass row-level security) is printed as that one line, whatever the engine
// wrapped around it while building the stream.
func cliError(err error) string {
	if errors.Is(err, pgrole.ErrCannotBypassRLS) {
		return "error: " + pgrole.ErrCannotBypassRLS.Error()
	}
	return err.Error()
}
