// Command speculapro is SpeculaPro's one binary: the Benthos engine with our
// plugins and our own subcommands (migrate, topics, dev).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/pgrole"
	"github.com/speculapro/speculapro/internal/procmem"
	_ "github.com/speculapro/speculapro/plugins/all"
)

// version and commit are set at build time with -ldflags by the Makefile;
// without them buildInfo reads what Go embedded.
var (
	version = "dev"
	commit  = "unknown"
	built   = "unknown"
)

// about replaces the engine's one-line summary and description in the
// top-level help: this binary is SpeculaPro, not a general stream processor.
const about = `speculapro - SpeculaPro transaction monitoring: ingest, persist, stream rules, decisions - https://github.com/speculapro/speculapro`

const aboutDescription = `SpeculaPro accepts transactions and account events over HTTP (pipelines/ingest.yaml), files them
   into PostgreSQL (pipelines/persist.yaml), keeps running totals in Redis and evaluates each workspace's
   rules on the stream (pipelines/stream.yaml), and delivers alerts (pipelines/worker.yaml). Each role is a
   pipeline run by this one binary; docs/configuration.md lists every command.

     speculapro dev                            every role in one process, on the local stack
     speculapro migrate --bootstrap            roles, database and schema
     speculapro topics                         the Kafka topics
     speculapro run pipelines/ingest.yaml      one role
     speculapro workspace create --name demo   a tenant and its first API key`

func main() {
	// Every command runs under a soft memory limit; the pipelines it runs
	// state their own (their input's process_memory).
	procmem.Start()
	version, commit, built := buildInfo(version, commit, built)
	if topLevelHelp(os.Args[1:]) {
		os.Exit(printHelp(version, commit, built))
	}
	os.Exit(run(version, commit, built, os.Args))
}

// topLevelHelp reports whether args ask for the top-level help.
func topLevelHelp(args []string) bool {
	switch {
	case len(args) == 0:
		return true
	case len(args) == 1:
		return args[0] == "--help" || args[0] == "-h" || args[0] == "help" || args[0] == "h"
	}
	return false
}

// printHelp prints the engine's top-level help (its command list stays the
// engine's own, ours included) with SpeculaPro's summary and description.
func printHelp(version, commit, built string) int {
	r, w, err := os.Pipe()
	if err != nil {
		return run(version, commit, built, []string{os.Args[0], "--help"})
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	code := run(version, commit, built, []string{os.Args[0], "--help"})
	w.Close()
	os.Stdout = stdout
	fmt.Print(rewriteHelp(string(<-done)))
	return code
}

// rewriteHelp puts SpeculaPro's summary under NAME and its description
// under DESCRIPTION, keeping the rest of the engine's help.
func rewriteHelp(help string) string {
	lines := strings.Split(help, "\n")
	var out []string
	section := ""
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" && strings.ToUpper(t) == t && strings.HasSuffix(t, ":") && !strings.HasPrefix(l, " ") {
			section = t
			out = append(out, l)
			switch section {
			case "NAME:":
				out = append(out, "   "+about, "")
			case "DESCRIPTION:":
				out = append(out, "   "+aboutDescription, "")
			}
			continue
		}
		if section == "NAME:" || section == "DESCRIPTION:" {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// buildInfo falls back to the build information Go embeds when the
// Makefile's -ldflags did not set the version (go build, go install): the
// module version of `go install …@v1.2.3`, the VCS revision (with -dirty
// for uncommitted changes) and its commit time.
func buildInfo(version, commit, built string) (string, string, string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, commit, built
	}
	return fromBuildInfo(bi, version, commit, built)
}

// fromBuildInfo is buildInfo's fallback from a given build information.
func fromBuildInfo(bi *debug.BuildInfo, version, commit, built string) (string, string, string) {
	if version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	var rev, at string
	dirty := false
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.time":
			at = st.Value
		case "vcs.modified":
			dirty = st.Value == "true"
		}
	}
	if commit == "unknown" && rev != "" {
		commit = rev
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if dirty {
			commit += "-dirty"
		}
	}
	if built == "unknown" && at != "" {
		built = at
	}
	return version, commit, built
}

func run(version, commit, built string, args []string) int {
	code, err := service.RunCLIToCode(context.Background(),
		service.CLIOptSetArgs(args...),
		service.CLIOptSetBinaryName("speculapro"),
		service.CLIOptSetProductName("SpeculaPro"),
		service.CLIOptSetVersion(version+" (commit "+commit+")", built),
		service.CLIOptSetDocumentationURL("https://github.com/speculapro/speculapro"),
		// Log lines read as the docs quote them (level=WARN msg="…" count=3):
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
	return code
}

// cliError is the line printed for an error that stops the process. A start-up
// check whose words are documented (a persist, stream or worker role that cannot
// bypass row-level security) is printed as that one line, whatever the engine
// wrapped around it while building the stream.
func cliError(err error) string {
	if errors.Is(err, pgrole.ErrCannotBypassRLS) {
		return "error: " + pgrole.ErrCannotBypassRLS.Error()
	}
	return err.Error()
}
