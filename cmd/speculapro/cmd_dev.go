package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/speculapro/speculapro/devtools/embedkafka"
	"github.com/speculapro/speculapro/internal/config"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/redisconn"
)

// Dev defaults differ from production ones only where production has no safe
// default: a laptop wants few partitions and needs no secret keys.
const (
	devPartitions     = "6"
	devSystemDBURL    = "postgres://speculapro_system:speculapro_system@127.0.0.1:5432/speculapro?sslmode=disable"
	devStopGrace      = 30 * time.Second
	devObservabilityF = "config/observability.yaml"
	// devRedisWait bounds dev's start-up check of Redis.
	devRedisWait = 3 * time.Second
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "Run every pipeline in pipelines/ in one process, with an embedded broker unless SP_KAFKA_BROKERS is set",
		Description: `Starts SpeculaPro on one machine for development:

  1. Kafka: when SP_KAFKA_BROKERS is unset, an embedded Kafka-protocol broker
     (franz-go kfake) listens on --kafka-addr and keeps its data in
     $SP_DATA_DIR/kafka, so a restart loses nothing; otherwise that broker is used.
  2. PostgreSQL: 'speculapro migrate --bootstrap' (roles, database, schema).
  3. Topics: 'speculapro topics' (SP_KAFKA_PARTITIONS defaults to 6 here).
  4. Redis (SP_REDIS_URL): the stream pipelines keep their running totals
     there; dev says which it uses and warns when it does not answer (the
     stream then waits for it; the other roles run regardless).
  5. Pipelines: 'speculapro streams -o config/observability.yaml pipelines/*.yaml'.

It prints the addresses it serves and stops cleanly on Ctrl-C. SP_DB_SYSTEM_URL
defaults to the local stack's speculapro_system role, and publicly known
dev-only identity keys are used when SP_ENCRYPTION_KEY / SP_FINGERPRINT_KEY are
unset (never in production: anyone can decrypt what they protect). The worker
(pipelines/worker.yaml) runs too, with SP_WEBHOOK_ALLOW_INSECURE defaulting to
true so webhooks may go to http:// and loopback receivers on this machine.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pipelines", Value: "pipelines", Usage: "folder whose *.yaml pipelines are run (files ending _benthos_test.yaml are skipped)"},
			&cli.StringFlag{Name: "observability", Value: devObservabilityF, Usage: "root config with http, logger, metrics and tracer"},
			&cli.StringFlag{Name: "kafka-addr", Value: embedkafka.DefaultAddr, Usage: "where the embedded broker listens when SP_KAFKA_BROKERS is unset"},
		},
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("dev: locating own binary: %w", err)
	}
	setDevDefaults()

	if !config.KafkaBrokers.IsSet() {
		dataDir := filepath.Join(config.DataDir.Value(), "kafka")
		broker, err := embedkafka.Start(c.String("kafka-addr"), dataDir)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer broker.Close()
		os.Setenv(config.KafkaBrokers.Name, broker.Addrs()[0])
		fmt.Printf("dev: embedded Kafka broker on %s (data in %s)\n", broker.Addrs()[0], dataDir)
	} else {
		fmt.Printf("dev: using Kafka at %s\n", config.KafkaBrokers.Value())
	}

	for _, step := range [][]string{{"migrate", "--bootstrap"}, {"topics"}} {
		if err := runChild(ctx, self, step...); err != nil {
			return fmt.Errorf("dev: speculapro %s: %w", step[0], err)
		}
	}

	pipelines, err := devPipelines(c.String("pipelines"))
	if err != nil {
		return err
	}
	fmt.Printf("dev: using Redis at %s (running totals of the stream pipelines)\n", redactedRedisURL(config.RedisURL.Value()))
	if err := pingRedis(ctx, config.RedisURL.Value()); err != nil {
		fmt.Printf("dev: WARNING: Redis does not answer (%v); the stream pipelines wait for it. Start it with `bash deploy/local/stack.sh up` (make run does), or set SP_REDIS_URL\n", err)
	}
	fmt.Printf("dev: HTTP on http://%s (metrics at /metrics, readiness at /ready)\n", config.HTTPAddr.Value())
	fmt.Printf("dev: ingest API on http://%s/v1 (OpenAPI at /v1/openapi.json; a key: speculapro workspace create, then speculapro apikey create)\n", config.IngestAddr.Value())
	fmt.Printf("dev: decision API on http://%s/v1/decisions (OpenAPI at /v1/decisions/openapi.json; the same API keys)\n", config.DecisionAddr.Value())
	fmt.Printf("dev: case API on http://%s/v1/cases (OpenAPI at /v1/cases/openapi.json; a key with the cases scope: speculapro apikey create --scopes cases)\n", config.CaseAddr.Value())
	fmt.Printf("dev: running %d pipeline(s) from %s; Ctrl-C stops\n", len(pipelines), c.String("pipelines"))
	args := append([]string{"streams", "-o", c.String("observability")}, pipelines...)
	err = runChild(ctx, self, args...)
	if ctx.Err() != nil {
		// A stop we were asked for is not a failure, whatever the child's code.
		fmt.Println("dev: stopped")
		return nil
	}
	return err
}

// setDevDefaults fills in the settings a laptop has no reason to set by hand.
func setDevDefaults() {
	setDefault := func(s config.Setting, v string) {
		if !s.IsSet() {
			os.Setenv(s.Name, v)
		}
	}
	setDefault(config.KafkaPartitions, devPartitions)
	setDefault(config.DBSystemURL, devSystemDBURL)
	// The worker may deliver to a receiver on this machine (http://localhost).
	setDefault(config.WebhookAllowInsecure, "true")
	if !config.EncryptionKey.IsSet() || !config.FingerprintKey.IsSet() {
		enc, fp := identity.DevKeys()
		setDefault(config.EncryptionKey, enc)
		setDefault(config.FingerprintKey, fp)
		fmt.Println("dev: WARNING: SP_ENCRYPTION_KEY / SP_FINGERPRINT_KEY unset, using the publicly known dev-only keys")
	}
}

func devPipelines(dir string) ([]string, error) {
	all, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("dev: listing pipelines in %s: %w", dir, err)
	}
	var out []string
	for _, p := range all {
		// The engine's unit-test definitions sit beside the pipelines; they are
		// not pipelines.
		if !strings.HasSuffix(p, "_benthos_test.yaml") {
			out = append(out, p)
		}
	}
	return out, nil
}

// redactedRedisURL is SP_REDIS_URL as dev prints it: every URL of the list
// with its password masked.
func redactedRedisURL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// pingRedis checks that SP_REDIS_URL answers, within devRedisWait.
func pingRedis(ctx context.Context, raw string) error {
	client, err := redisconn.Open(raw)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, devRedisWait)
	defer cancel()
	return client.Ping(ctx).Err()
}

// runChild runs this binary with args, in its own process group so that a
// terminal's Ctrl-C reaches only dev, which then asks the child to stop once:
// the engine treats a second interrupt as "stop now".
func runChild(ctx context.Context, self string, args ...string) error {
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil
		}
		return err
	case <-time.After(devStopGrace):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("did not stop within %s; killed", devStopGrace)
	}
}
