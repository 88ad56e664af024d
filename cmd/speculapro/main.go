// Command speculapro is SpeculaPro's one binary: the Benthos engine with our
// plugins and our own subcommands (migrate, topics, dev).
package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/speculapro/speculapro/plugins/all"
)

// version and commit are set at build time with -ldflags by the Makefile.
var (
	version = "dev"
	commit  = "unknown"
	built   = "unknown"
)

func main() {
	service.RunCLI(context.Background(),
		service.CLIOptSetBinaryName("speculapro"),
		service.CLIOptSetProductName("SpeculaPro"),
		service.CLIOptSetVersion(version+" (commit "+commit+")", built),
		service.CLIOptSetDocumentationURL("https://github.com/speculapro/speculapro"),
		service.CLIOptAddCommand(migrateCommand()),
		service.CLIOptAddCommand(topicsCommand()),
		service.CLIOptAddCommand(devCommand()),
	)
}
