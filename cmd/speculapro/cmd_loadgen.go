package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/kafkaconf"
)

const (
	loadgenFlagCount          = "count"
	loadgenFlagRate           = "rate"
	loadgenFlagAccounts       = "accounts"
	loadgenFlagWorkspaces     = "workspaces"
	loadgenFlagCounterparties = "counterparties"
	loadgenFlagSeed           = "seed"
	loadgenFlagTopic          = "topic"
	loadgenFlagKnownRatio     = "known-accounts-ratio"
	loadgenFlagLinkedRatio    = "linked-ratio"
	loadgenFlagDBURL          = "db-url"
	loadgenFlagManifest       = "manifest"
	loadgenFlagDevKeys        = "dev-keys"
	loadgenFlagStart          = "start"
	loadgenFlagSpread         = "spread"
	loadgenFlagLinger         = "linger"
	loadgenFlagAccountEvents  = "account-events"
	loadgenFlagEventsTopic    = "events-topic"

	// loadgenSetupTimeout bounds seeding PostgreSQL and the Kafka check, so
	// a service that does not answer ends the command instead of hanging it.
	loadgenSetupTimeout = 2 * time.Minute
)

// loadgenCommand produces synthetic transactions to Kafka for tests,
// benchmarks and demos.
func loadgenCommand() *cli.Command {
	return &cli.Command{
		Name:  "loadgen",
		Usage: "Produce realistic synthetic transactions to Kafka at a given rate, with progress",
		Description: `Sends --count transactions to <SP_KAFKA_TOPIC_PREFIX>txn.ingested (or --topic) in the envelope
the ingest API writes, keyed workspace_id:account_external_id, with fixed IDs. Accounts are spread over
--workspaces; --known-accounts-ratio of the customers (and their accounts) are first written to
PostgreSQL (--db-url, a speculapro_system URL) as real records, the rest reach the database as
placeholders. Counterparties are drawn from a pool of --counterparties with a heavy head; a few pay a
known account's own IBAN, so linking can be checked. Identifiers are only sent encrypted, masked and
fingerprinted with SP_ENCRYPTION_KEY and SP_FINGERPRINT_KEY (--dev-keys: the public development keys).

The same --seed and --start give the same transactions and IDs; --manifest writes both, with what
Kafka acknowledged, so a test can recompute exactly what was sent. Progress goes to stderr every
second, then a summary. Exits non-zero when a record was not acknowledged.

--account-events also sends that many account events (sign_in, failed_otp, new_device, sim_swap,
profile_change) over the same customers and time span to <SP_KAFKA_TOPIC_PREFIX>account.events (or
--events-topic), keyed workspace_id:customer_external_id, before the transactions (at --rate too);
one in every 25 starts an incident on a customer (a burst of failed one-time codes, a SIM swap, a new
device, a profile change) that a few large transfers to a mule then follow, so rules have something
to find.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: loadgenFlagCount, Value: loadgen.DefaultCount, Usage: "transactions to send"},
			&cli.Float64Flag{Name: loadgenFlagRate, Value: 0, Usage: "transactions per second; 0 sends as fast as Kafka takes them"},
			&cli.IntFlag{Name: loadgenFlagAccounts, Value: loadgen.DefaultAccounts, Usage: "monitored accounts (two per customer)"},
			&cli.IntFlag{Name: loadgenFlagWorkspaces, Value: loadgen.DefaultWorkspaces, Usage: "workspaces the accounts are spread over"},
			&cli.IntFlag{Name: loadgenFlagCounterparties, Value: loadgen.DefaultCounterparties, Usage: "size of the counterparty pool, shared out between the workspaces"},
			&cli.Uint64Flag{Name: loadgenFlagSeed, Value: 1, Usage: "random seed; the same seed and --start give the same transactions"},
			&cli.StringFlag{Name: loadgenFlagTopic, Usage: "topic to write to (default <SP_KAFKA_TOPIC_PREFIX>txn.ingested)"},
			&cli.Float64Flag{Name: loadgenFlagKnownRatio, Value: loadgen.DefaultKnownAccountsRatio, Usage: "share of customers and accounts written to PostgreSQL as real records first (needs --db-url)"},
			&cli.Float64Flag{Name: loadgenFlagLinkedRatio, Value: loadgen.DefaultLinkedRatio, Usage: "share of counterparties paying a known account's own IBAN"},
			&cli.StringFlag{Name: loadgenFlagDBURL, Value: config.DBSystemURL.Value(), DefaultText: "$" + config.DBSystemURL.Name, Usage: "PostgreSQL URL of speculapro_system, to create the workspaces and the known customers and accounts; empty: the workspaces must exist"},
			&cli.StringFlag{Name: loadgenFlagManifest, Usage: "file to write the run's manifest to (JSON: generator settings, workspaces, acknowledged count)"},
			&cli.BoolFlag{Name: loadgenFlagDevKeys, Usage: "use the public development keys instead of SP_ENCRYPTION_KEY and SP_FINGERPRINT_KEY (local stacks only)"},
			&cli.TimestampFlag{Name: loadgenFlagStart, Layout: time.RFC3339, Usage: "occurred_at of the last transaction (RFC 3339; default now)"},
			&cli.DurationFlag{Name: loadgenFlagSpread, Value: loadgen.DefaultSpread, Usage: "how far back occurred_at goes from --start (at most 336h)"},
			&cli.DurationFlag{Name: loadgenFlagLinger, Value: loadgen.DefaultLinger, Usage: "how long the producer lets a batch fill"},
			&cli.IntFlag{Name: loadgenFlagAccountEvents, Value: 0, Usage: "account events to send first, over the same customers"},
			&cli.StringFlag{Name: loadgenFlagEventsTopic, Usage: "topic for the account events (default <SP_KAFKA_TOPIC_PREFIX>account.events)"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := runLoadgen(ctx, c, c.App.ErrWriter); err != nil {
				return fmt.Errorf("loadgen: %w", err)
			}
			return nil
		},
	}
}

func runLoadgen(ctx context.Context, c *cli.Context, stderr io.Writer) error {
	encKey, fpKey := config.EncryptionKey.Value(), config.FingerprintKey.Value()
	if c.Bool(loadgenFlagDevKeys) {
		encKey, fpKey = identity.DevKeys()
		fmt.Fprintln(stderr, "loadgen: using the public development keys (--dev-keys): never where real data is stored")
	}
	protector, err := identity.NewProtector(encKey, fpKey)
	if err != nil {
		return fmt.Errorf("%w (or pass --%s on a local stack)", err, loadgenFlagDevKeys)
	}

	start := time.Now().UTC().Truncate(time.Second)
	if t := c.Timestamp(loadgenFlagStart); t != nil {
		start = t.UTC()
	}
	cfg := loadgen.Config{
		Seed:               c.Uint64(loadgenFlagSeed),
		Count:              c.Int(loadgenFlagCount),
		Accounts:           c.Int(loadgenFlagAccounts),
		Workspaces:         c.Int(loadgenFlagWorkspaces),
		Counterparties:     c.Int(loadgenFlagCounterparties),
		KnownAccountsRatio: c.Float64(loadgenFlagKnownRatio),
		LinkedRatio:        c.Float64(loadgenFlagLinkedRatio),
		Start:              start,
		Spread:             c.Duration(loadgenFlagSpread),
		AccountEvents:      c.Int(loadgenFlagAccountEvents),
	}
	dbURL := c.String(loadgenFlagDBURL)
	if dbURL == "" && cfg.KnownAccountsRatio > 0 {
		return fmt.Errorf("--%s %v needs --%s (or %s) to write the known accounts; pass --%s 0 to send only unknown ones",
			loadgenFlagKnownRatio, cfg.KnownAccountsRatio, loadgenFlagDBURL, config.DBSystemURL.Name, loadgenFlagKnownRatio)
	}
	g, err := loadgen.New(cfg, protector)
	if err != nil {
		return err
	}

	setupCtx, cancel := context.WithTimeout(ctx, loadgenSetupTimeout)
	defer cancel()
	if err := seedKnown(setupCtx, dbURL, g, cfg, stderr); err != nil {
		return err
	}

	topic, eventsTopic := loadgenTopics(c)
	// franz-go would wait for a missing topic until the delivery timeout and
	// then fail every record; say what to do instead.
	need := []string{topic}
	if cfg.AccountEvents > 0 {
		need = append(need, eventsTopic)
	}
	cl, err := loadgenProducer(setupCtx, c, need)
	if err != nil {
		return err
	}
	defer cl.Close()

	// Account events first, so the transfers that follow an incident reach
	// the stream after the incident's events, as they would in real life.
	var es loadgen.Summary
	if cfg.AccountEvents > 0 {
		var runErr error
		es, runErr = loadgen.Produce(ctx, cl, g, loadgen.ProduceOptions{
			Topic: eventsTopic, Kind: event.KindAccountEvent, Rate: c.Float64(loadgenFlagRate), Progress: stderr,
		})
		fmt.Fprintln(stderr, es)
		if runErr != nil {
			m := loadgen.NewManifest(g, 0, cfg.Count, loadgen.Summary{Topic: topic}).WithEvents(0, cfg.AccountEvents, es)
			return finishLoadgen(ctx, c, m, es, cfg.AccountEvents, "account events", runErr)
		}
	}
	s, runErr := loadgen.Produce(ctx, cl, g, loadgen.ProduceOptions{Topic: topic, Rate: c.Float64(loadgenFlagRate), Progress: stderr})
	fmt.Fprintln(stderr, s)
	m := loadgen.NewManifest(g, 0, cfg.Count, s)
	if cfg.AccountEvents > 0 {
		m = m.WithEvents(0, cfg.AccountEvents, es)
	}
	return finishLoadgen(ctx, c, m, s, cfg.Count, "transactions", runErr)
}

// loadgenTopics are the topics of transactions and account events: the
// flags', or the names under SP_KAFKA_TOPIC_PREFIX.
func loadgenTopics(c *cli.Context) (topic, eventsTopic string) {
	topic = c.String(loadgenFlagTopic)
	if topic == "" {
		topic = config.KafkaTopicPrefix.Value() + "txn.ingested"
	}
	eventsTopic = c.String(loadgenFlagEventsTopic)
	if eventsTopic == "" {
		eventsTopic = config.KafkaTopicPrefix.Value() + "account.events"
	}
	return topic, eventsTopic
}

// seedKnown writes the known workspaces, customers and accounts when dbURL
// is given; without it the workspaces must already exist.
func seedKnown(ctx context.Context, dbURL string, g *loadgen.Generator, cfg loadgen.Config, stderr io.Writer) error {
	if dbURL != "" {
		st, err := loadgen.SeedKnownURL(ctx, dbURL, g)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "loadgen: %d workspaces (%d new), %d known customers and %d known accounts written\n",
			cfg.Workspaces, st.Workspaces, st.Customers, st.Accounts)
	} else {
		fmt.Fprintf(stderr, "loadgen: no --%s: workspaces %v must already exist\n", loadgenFlagDBURL, g.Workspaces())
	}
	return nil
}

// loadgenProducer opens the Kafka producer and checks that every topic of
// need exists.
func loadgenProducer(ctx context.Context, c *cli.Context, need []string) (*kgo.Client, error) {
	conn, err := kafkaconf.FromEnv()
	if err != nil {
		return nil, err
	}
	opts, err := loadgen.ProducerOpts(conn, c.Duration(loadgenFlagLinger))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka producer: %w", err)
	}
	if err := conn.Check(ctx, cl); err != nil {
		cl.Close()
		return nil, err
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, need...)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("looking up topics %v: %w", need, err)
	}
	for _, name := range need {
		if !topics.Has(name) || topics[name].Err != nil {
			cl.Close()
			return nil, fmt.Errorf("topic %s does not exist: create it with `speculapro topics`", name)
		}
	}
	return cl, nil
}

// finishLoadgen writes the manifest (when asked for) and returns the run's
// error, saying how far an interrupted run got.
func finishLoadgen(ctx context.Context, c *cli.Context, m loadgen.Manifest, s loadgen.Summary, total int, what string, runErr error) error {
	if path := c.String(loadgenFlagManifest); path != "" {
		if err := loadgen.WriteManifest(path, m); err != nil {
			return errors.Join(runErr, err)
		}
	}
	if runErr != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted after %d of %d %s: %w", s.Sent, total, what, runErr)
	}
	return runErr
}
