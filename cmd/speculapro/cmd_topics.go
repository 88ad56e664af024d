package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/internal/kafkaconf"
	"github.com/speculapro/speculapro/internal/kafkatopics"
)

// topicsTimeout bounds the whole command: a deployment step must not hang
// on a broker that does not answer.
const topicsTimeout = 2 * time.Minute

// topicsCommand creates SpeculaPro's topics that are missing (docs/kafka.md
// lists them).
func topicsCommand() *cli.Command {
	return &cli.Command{
		Name:  "topics",
		Usage: "Create the missing Kafka topics (8 and their .dlq twins); existing topics are left untouched",
		Description: "Connects with the SP_KAFKA_* settings and creates every missing topic with SP_KAFKA_PARTITIONS\n" +
			"partitions and SP_KAFKA_REPLICATION_FACTOR replicas, printing `created <name>` for each. Safe to run\n" +
			"on every deployment. Exits non-zero when the broker refuses a topic, after creating the rest.",
		Action: func(c *cli.Context) error {
			ctx, cancel := context.WithTimeout(c.Context, topicsTimeout)
			defer cancel()
			return runTopics(ctx, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func runTopics(ctx context.Context, stdout, stderr io.Writer) error {
	spec, err := kafkatopics.SpecFromEnv()
	if err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	conn, err := kafkaconf.FromEnv()
	if err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	opts, err := conn.ClientOpts()
	if err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("topics: creating Kafka client: %w", err)
	}
	defer cl.Close()
	if err := conn.Check(ctx, cl); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	res, err := kafkatopics.Ensure(ctx, kadm.NewClient(cl), spec)
	if err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	for _, n := range res.Created {
		fmt.Fprintf(stdout, "created %s\n", n)
	}
	for _, r := range res.Refused {
		fmt.Fprintf(stderr, "error: topic %s: %s\n", r.Topic, r.Reason)
	}
	if len(res.Refused) > 0 {
		return fmt.Errorf("topics: the broker refused %d of %d topics", len(res.Refused), len(kafkatopics.Names(spec.Prefix)))
	}
	return nil
}
