package kafkaconf

import (
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/config"
)

// Field names shared by every Kafka plugin.
const (
	FieldSeedBrokers = "seed_brokers"
	FieldTLS         = "tls"
	FieldSASL        = "sasl"
)

// Config is a resolved connection: where the brokers are and how to talk to them.
// STUB: TLS and SASL are filled in by the Kafka issue.
type Config struct {
	SeedBrokers []string
}

// Fields returns the connection fields every Kafka plugin embeds in its spec.
func Fields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringListField(FieldSeedBrokers).
			Description("Addresses of Kafka brokers to connect to first. Each item may hold several comma-separated addresses.").
			Example([]string{"localhost:19092"}).
			Default([]any{"${SP_KAFKA_BROKERS:localhost:19092}"}),
	}
}

// FromParsed reads the connection fields of a plugin's parsed config.
func FromParsed(conf *service.ParsedConfig) (Config, error) {
	brokers, err := conf.FieldStringList(FieldSeedBrokers)
	if err != nil {
		return Config{}, err
	}
	return Config{SeedBrokers: splitBrokers(brokers)}, nil
}

// FromEnv reads the connection from the SP_KAFKA_* settings, for commands.
func FromEnv() (Config, error) {
	return Config{SeedBrokers: splitBrokers([]string{config.KafkaBrokers.Value()})}, nil
}

// ClientOpts turns the connection into franz-go options.
func (c Config) ClientOpts() ([]kgo.Opt, error) {
	return []kgo.Opt{kgo.SeedBrokers(c.SeedBrokers...)}, nil
}

func splitBrokers(in []string) []string {
	var out []string
	for _, b := range in {
		for _, s := range strings.Split(b, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}
