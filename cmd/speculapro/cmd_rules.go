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

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// rulesTimeout bounds rules apply and list: an admin step must not hang on a
// database that does not answer.
const rulesTimeout = 30 * time.Second

// errRulesTestFailed: `rules test` ran and some case failed (the report says
// which); the exit code must say so to CI.
var errRulesTestFailed = errors.New("rule tests failed")

// rulesCommand manages a workspace's detection rules from rule files.
func rulesCommand() *cli.Command {
	// Not Required: the check is rulesArgs', which also finds the flag after
	// the file names.
	workspace := &cli.StringFlag{Name: "workspace", Usage: "the workspace's ID (required)"}
	return &cli.Command{
		Name:  "rules",
		Usage: "Manage detection rules: apply rule files to a workspace, list them, run their tests, report how they perform",
		Subcommands: []*cli.Command{{
			Name:      "apply",
			Usage:     "Create or update a workspace's rules from rule files (by name)",
			ArgsUsage: "<rule files…>",
			Description: "Connects as SP_DB_URL (the speculapro_app role, bound to --workspace by row-level security).\n" +
				"Every file is parsed and every expression compiled first; any problem is printed with its\n" +
				"file:line:column and nothing is written. Then prints one line per rule: `created <name> v1`,\n" +
				"`updated <name> v3` (the version goes up only when something changed, a switch of `mode` between\n" +
				"live and shadow included) or `unchanged <name> v2`.\n" +
				"--prune also removes the workspace's rules no file defines: `deleted <name>`, or `disabled <name>`\n" +
				"for a rule with hits or alerts (they refer to it, so it is kept, disabled). --dry-run prints the\n" +
				"same lines and writes nothing. The stream picks the change up within seconds.",
			Flags: []cli.Flag{
				workspace,
				&cli.BoolFlag{Name: "prune", Usage: "delete (or, when it has hits, disable) the workspace's rules that no file defines"},
				&cli.BoolFlag{Name: "dry-run", Usage: "print what would change and write nothing"},
			},
			Action: func(c *cli.Context) error {
				a, err := rulesArgs(c, true)
				if err != nil {
					return fmt.Errorf("rules apply: %w", err)
				}
				ctx, cancel := context.WithTimeout(c.Context, rulesTimeout)
				defer cancel()
				return runRulesApply(ctx, c.App.Writer, config.DBURL.Value(), a)
			},
		}, {
			Name:  "list",
			Usage: "List a workspace's rules, enabled or not",
			Flags: []cli.Flag{workspace},
			Action: func(c *cli.Context) error {
				a, err := rulesArgs(c, false)
				if err != nil {
					return fmt.Errorf("rules list: %w", err)
				}
				ctx, cancel := context.WithTimeout(c.Context, rulesTimeout)
				defer cancel()
				return runRulesList(ctx, c.App.Writer, config.DBURL.Value(), a.workspace)
			},
		}, {
			Name:      "test",
			Usage:     "Run every rule's test cases with the real evaluator; exits 1 on a failure or a rule without tests",
			ArgsUsage: "<rule files…>",
			Description: "Needs no database: the rules of all the files are compiled into one program, as the stream\n" +
				"compiles a workspace's, and each test case's event and features are evaluated with it.",
			Action: func(c *cli.Context) error {
				return runRulesTest(c.App.Writer, c.Args().Slice())
			},
		}, rulesStatsCommand(workspace), rulesBacktestCommand()},
	}
}

// applyArgs is what rules apply and list were given.
type applyArgs struct {
	files     []string
	workspace event.UUID
	prune     bool
	dryRun    bool
}

// rulesArgs reads the flags wherever they are: the flag parser stops at the
// first file name, and `rules apply config/rules/*.yaml --workspace …` is
// how people type it.
func rulesArgs(c *cli.Context, wantFiles bool) (applyArgs, error) {
	a := applyArgs{prune: c.Bool("prune"), dryRun: c.Bool("dry-run")}
	ws := c.String("workspace")
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") {
			a.files = append(a.files, arg)
			continue
		}
		switch name {
		case "workspace":
			if !hasValue {
				if i+1 == len(args) {
					return a, errors.New("--workspace needs a value")
				}
				i++
				value = args[i]
			}
			ws = value
		case "prune":
			a.prune = !hasValue || value == "true"
		case "dry-run":
			a.dryRun = !hasValue || value == "true"
		default:
			return a, fmt.Errorf("unknown flag %s", arg)
		}
	}
	if ws == "" {
		return a, errors.New("--workspace is required")
	}
	var err error
	if a.workspace, err = event.ParseUUID(ws); err != nil {
		return a, fmt.Errorf("--workspace: %w", err)
	}
	if wantFiles && len(a.files) == 0 {
		return a, errors.New("no rule files given")
	}
	if !wantFiles && len(a.files) > 0 {
		return a, fmt.Errorf("unexpected argument %q", a.files[0])
	}
	return a, nil
}

func runRulesApply(ctx context.Context, stdout io.Writer, dbURL string, a applyArgs) error {
	defs, err := rules.ParseFiles(a.files...)
	if err != nil {
		return fmt.Errorf("rules apply: nothing written:\n%w", err)
	}
	rs := make([]rules.Rule, len(defs))
	for i := range defs {
		rs[i] = defs[i].Rule
	}
	// Each rule compiled alone in ParseFiles; this is the program the stream
	// will build from them.
	if _, err := rules.Compile(rs); err != nil {
		return fmt.Errorf("rules apply: nothing written: %w", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("rules apply: connecting to PostgreSQL (SP_DB_URL): %w", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("rules apply: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	changes, err := rules.Apply(ctx, tx, a.workspace, rs, a.prune)
	if err != nil {
		return fmt.Errorf("rules apply: nothing written: %w", err)
	}
	if !a.dryRun {
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("rules apply: committing: %w", err)
		}
	}
	for _, c := range changes {
		fmt.Fprintln(stdout, c)
	}
	if a.dryRun {
		fmt.Fprintln(stdout, "dry run: nothing written")
	}
	return nil
}

func runRulesList(ctx context.Context, stdout io.Writer, dbURL string, ws event.UUID) error {
	var rs []rules.Rule
	err := inWorkspace(ctx, dbURL, ws, func(tx pgx.Tx) error {
		var err error
		rs, err = rules.List(ctx, tx, ws)
		return err
	})
	if err != nil {
		return fmt.Errorf("rules list: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tMODE\tAPPLIES_TO\tACTION\tSEVERITY\tSCORE\tENABLED")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\t%s\t%s\t%s\t%t\n", r.Name, r.Version, r.Mode, r.AppliesTo, r.Action, r.Severity, r.Score, r.Enabled)
	}
	return tw.Flush()
}

func runRulesTest(stdout io.Writer, files []string) error {
	if len(files) == 0 {
		return errors.New("rules test: no rule files given")
	}
	defs, err := rules.ParseFiles(files...)
	if err != nil {
		return fmt.Errorf("rules test:\n%w", err)
	}
	results, err := rules.RunTests(defs)
	if err != nil {
		return fmt.Errorf("rules test: %w", err)
	}
	if failed := rules.Report(stdout, results); failed > 0 {
		return fmt.Errorf("rules test: %d of %d: %w", failed, len(results), errRulesTestFailed)
	}
	return nil
}
