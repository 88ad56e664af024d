package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/webhook"
)

// webhookEventTypes are the events an endpoint may subscribe to.
var webhookEventTypes = []string{
	"alert.created", "decision.created",
	"case.opened", "case.alert_attached", // the stream
	"case.assigned", "case.commented", "case.status_changed", "case.closed", "case.reopened", // the case API
}

// errNoEndpoint: the endpoint does not exist in the workspace (row-level
// security makes another workspace's look the same).
var errNoEndpoint = errors.New("no such webhook endpoint in this workspace")

func webhookCommand() *cli.Command {
	wsFlag := &cli.StringFlag{Name: "workspace", Usage: "the workspace's ID", Required: true}
	epFlag := &cli.StringFlag{Name: "endpoint", Usage: "the endpoint's ID (see webhook list)", Required: true}
	return &cli.Command{
		Name:  "webhook",
		Usage: "Manage a workspace's webhook endpoints (the worker delivers to them)",
		Description: "Connects as SP_DB_URL (the speculapro_app role; row-level security applies). Signing secrets\n" +
			"are stored encrypted with SP_ENCRYPTION_KEY and printed once, when made. URLs must be https://\n" +
			"to a public address: `add` resolves the host and refuses loopback, private, link-local and every other\n" +
			"special-purpose address. SP_WEBHOOK_ALLOW_INSECURE=true allows http:// and loopback (local stacks and\n" +
			"tests); SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS lists private ranges of your own network.",
		Subcommands: []*cli.Command{
			{
				Name:  "add",
				Usage: "Add an endpoint; prints its ID and signing secret (once)",
				Flags: []cli.Flag{
					wsFlag,
					&cli.StringFlag{Name: "url", Usage: "where deliveries are POSTed", Required: true},
					&cli.StringFlag{Name: "events", Usage: "comma-separated event types (" + strings.Join(webhookEventTypes, ", ") + "); empty: every type"},
				},
				Action: func(c *cli.Context) error {
					return webhookAction(c, "add", func(ctx context.Context, ws event.UUID) error {
						return runWebhookAdd(ctx, c.App.Writer, ws, c.String("url"), c.String("events"))
					})
				},
			},
			{
				Name:  "list",
				Usage: "List the workspace's endpoints (URLs without their query, which may hold a token)",
				Flags: []cli.Flag{wsFlag},
				Action: func(c *cli.Context) error {
					return webhookAction(c, "list", func(ctx context.Context, ws event.UUID) error {
						return runWebhookList(ctx, c.App.Writer, ws)
					})
				},
			},
			{
				Name:  "rotate-secret",
				Usage: "Give an endpoint a new signing secret; the old one keeps signing beside it for --grace",
				Flags: []cli.Flag{
					wsFlag, epFlag,
					&cli.DurationFlag{Name: "grace", Usage: "how long the old secret stays valid (default SP_WEBHOOK_SECRET_GRACE)"},
				},
				Action: webhookRotateAction,
			},
			{
				Name:  "disable",
				Usage: "Stop delivering to an endpoint (its pending deliveries wait)",
				Flags: []cli.Flag{wsFlag, epFlag},
				Action: func(c *cli.Context) error {
					return webhookAction(c, "disable", func(ctx context.Context, ws event.UUID) error {
						return runWebhookSetEnabled(ctx, c.App.Writer, ws, c.String("endpoint"), false)
					})
				},
			},
			{
				Name:  "enable",
				Usage: "Deliver to an endpoint again (after disable, a suspension or a 410), its failure count reset",
				Flags: []cli.Flag{wsFlag, epFlag},
				Action: func(c *cli.Context) error {
					return webhookAction(c, "enable", func(ctx context.Context, ws event.UUID) error {
						return runWebhookSetEnabled(ctx, c.App.Writer, ws, c.String("endpoint"), true)
					})
				},
			},
		},
	}
}

// webhookRotateAction runs webhook rotate-secret: --grace, or
// SP_WEBHOOK_SECRET_GRACE when it is not given.
func webhookRotateAction(c *cli.Context) error {
	grace := c.Duration("grace")
	if !c.IsSet("grace") {
		var err error
		if grace, err = time.ParseDuration(config.WebhookSecretGrace.Value()); err != nil {
			return fmt.Errorf("webhook rotate-secret: %s: %w", config.WebhookSecretGrace.Name, err)
		}
	}
	if grace < 0 {
		return errors.New("webhook rotate-secret: --grace must not be negative")
	}
	return webhookAction(c, "rotate-secret", func(ctx context.Context, ws event.UUID) error {
		return runWebhookRotate(ctx, c.App.Writer, ws, c.String("endpoint"), grace)
	})
}

// webhookAction is workspaceAction naming the command in every error.
func webhookAction(c *cli.Context, name string, fn func(context.Context, event.UUID) error) error {
	return workspaceAction(c, "webhook "+name, func(ctx context.Context, ws event.UUID) error {
		if err := fn(ctx, ws); err != nil {
			return fmt.Errorf("webhook %s: %w", name, err)
		}
		return nil
	})
}

// newSealedSecret makes an endpoint's signing secret and seals it under the
// workspace's key: the clear secret is printed once for the operator, only
// the sealed one is stored (add and rotate both do this).
func newSealedSecret(ws event.UUID) (secret string, sealed []byte, err error) {
	keys, err := identity.ParseKeyring(config.EncryptionKey.Value())
	if err != nil {
		return "", nil, fmt.Errorf("the key ring that encrypts signing secrets: %w", err)
	}
	secret, err = webhook.NewSecret()
	if err != nil {
		return "", nil, err
	}
	sealed, err = webhook.SealSecret(keys, ws, secret)
	if err != nil {
		return "", nil, err
	}
	return secret, sealed, nil
}

func parseEventTypes(raw string) ([]string, error) {
	out := []string{}
	for _, t := range strings.Split(raw, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !slices.Contains(webhookEventTypes, t) {
			return nil, fmt.Errorf("--events: unknown event type %q (want %s)", t, strings.Join(webhookEventTypes, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// addressPolicy is the worker's address policy, from the same settings, so
// `add` refuses what the worker would refuse.
func addressPolicy() (webhook.Policy, error) {
	p, err := webhook.NewPolicy(config.WebhookAllowInsecure.Value() == "true", config.WebhookAllowPrivate.Value())
	if err != nil {
		return webhook.Policy{}, fmt.Errorf("%s: %w", config.WebhookAllowPrivate.Name, err)
	}
	return p, nil
}

// lookupTimeout bounds resolving an endpoint's host at registration.
const lookupTimeout = 10 * time.Second

func runWebhookAdd(ctx context.Context, stdout io.Writer, ws event.UUID, rawURL, events string) error {
	policy, err := addressPolicy()
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	err = policy.CheckRegistration(lctx, rawURL, net.DefaultResolver)
	cancel()
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	types, err := parseEventTypes(events)
	if err != nil {
		return err
	}
	secret, sealed, err := newSealedSecret(ws)
	if err != nil {
		return err
	}
	var id event.UUID
	err = inWorkspace(ctx, config.DBURL.Value(), ws, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM speculapro.workspaces WHERE id = $1 AND status = 'active'`, ws).Scan(&n); err != nil {
			return fmt.Errorf("looking up workspace %s: %w", ws, err)
		}
		if n == 0 {
			return fmt.Errorf("workspace %s: %w", ws, errNoWorkspace)
		}
		err := tx.QueryRow(ctx, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
VALUES ($1, $2, $3, $4) RETURNING id`, ws, rawURL, sealed, types).Scan(&id)
		if err != nil {
			return fmt.Errorf("inserting the endpoint: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "endpoint_id=%s\nsecret=%s\n", id, secret)
	return nil
}

// displayURL is a URL without its query and fragment, which may carry a
// token (chat webhooks put theirs in the path, so a path is cut too when long).
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	s := u.Scheme + "://" + u.Host
	if len(u.Path) > 24 {
		s += u.Path[:12] + "…"
	} else {
		s += u.Path
	}
	if u.RawQuery != "" {
		s += "?…"
	}
	return s
}

func runWebhookList(ctx context.Context, stdout io.Writer, ws event.UUID) error {
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tURL\tEVENTS\tENABLED\tFAILED IN A ROW\tOLD SECRET VALID UNTIL\tDISABLED BECAUSE")
	err := inWorkspace(ctx, config.DBURL.Value(), ws, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, url, event_types, enabled, consecutive_failures,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret_expires_at END, coalesce(disabled_reason, '')
  FROM speculapro.webhook_endpoints WHERE workspace_id = $1 ORDER BY created_at, id`, ws)
		if err != nil {
			return fmt.Errorf("listing endpoints: %w", err)
		}
		var (
			id      event.UUID
			u       string
			types   []string
			enabled bool
			fails   int32
			until   *time.Time
			reason  string
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &u, &types, &enabled, &fails, &until, &reason}, func() error {
			ev := strings.Join(types, ",")
			if ev == "" {
				ev = "(all)"
			}
			grace := "-"
			if until != nil {
				grace = until.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%s\t%s\n", id, displayURL(u), ev, enabled, fails, grace, reason)
			return nil
		})
		if err != nil {
			return fmt.Errorf("listing endpoints: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

func runWebhookRotate(ctx context.Context, stdout io.Writer, ws event.UUID, rawID string, grace time.Duration) error {
	id, err := event.ParseUUID(rawID)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	secret, sealed, err := newSealedSecret(ws)
	if err != nil {
		return err
	}
	var until time.Time
	err = inWorkspace(ctx, config.DBURL.Value(), ws, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE speculapro.webhook_endpoints
   SET previous_secret_encrypted = secret_encrypted,
       previous_secret_expires_at = now() + make_interval(secs => $3),
       secret_encrypted = $4, updated_at = now()
 WHERE id = $1 AND workspace_id = $2
RETURNING previous_secret_expires_at`, id, ws, grace.Seconds(), sealed).Scan(&until)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("endpoint %s: %w", id, errNoEndpoint)
		}
		if err != nil {
			return fmt.Errorf("storing the new secret: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "endpoint_id=%s\nsecret=%s\nprevious_secret_valid_until=%s\n", id, secret, until.UTC().Format(time.RFC3339))
	return nil
}

func runWebhookSetEnabled(ctx context.Context, stdout io.Writer, ws event.UUID, rawID string, enabled bool) error {
	id, err := event.ParseUUID(rawID)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	query := `UPDATE speculapro.webhook_endpoints SET enabled = false, disabled_reason = 'disabled by an operator', updated_at = now()
 WHERE id = $1 AND workspace_id = $2`
	if enabled {
		query = `UPDATE speculapro.webhook_endpoints SET enabled = true, disabled_reason = NULL, consecutive_failures = 0, failing_since = NULL, updated_at = now()
 WHERE id = $1 AND workspace_id = $2`
	}
	err = inWorkspace(ctx, config.DBURL.Value(), ws, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, query, id, ws)
		if err != nil {
			return fmt.Errorf("updating the endpoint: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("endpoint %s: %w", id, errNoEndpoint)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "endpoint_id=%s\nenabled=%t\n", id, enabled)
	return nil
}
