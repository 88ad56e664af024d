package kafkaconf

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/config"
)

// clearEnv makes the SP_KAFKA_* settings their defaults for one test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, s := range config.All() {
		if strings.HasPrefix(s.Name, "SP_KAFKA_") {
			t.Setenv(s.Name, "")
		}
	}
}

func parse(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	spec := service.NewConfigSpec().Fields(Fields()...)
	conf, err := spec.ParseYAML(yaml, nil)
	if err != nil {
		t.Fatalf("parsing YAML through the config spec: %v", err)
	}
	return FromParsed(conf)
}

func TestSettings(t *testing.T) {
	pki := newTestPKI(t)
	tests := []struct {
		name    string
		env     map[string]string
		yaml    string // parsed through the config spec; "" means FromEnv
		wantErr error
		errText string
		check   func(t *testing.T, c Config)
	}{
		{
			name: "env defaults",
			check: func(t *testing.T, c Config) {
				if got := strings.Join(c.SeedBrokers, ","); got != "localhost:19092" || c.TLS != nil || len(c.SASL) != 0 {
					t.Fatalf("got brokers %q tls %v sasl %v, want localhost:19092, plaintext, no SASL", got, c.TLS, c.SASL)
				}
			},
		},
		{
			// A plugin never reads the environment (the pipelines carry
			// ${SP_KAFKA_…} in their YAML): a field left out is the
			// documented default, whatever the environment says.
			name: "yaml defaults ignore env",
			env: map[string]string{"SP_KAFKA_BROKERS": "a:1, b:2", "SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CA_FILE": pki.caFile,
				"SP_KAFKA_SASL_MECHANISM": "scram-sha-512", "SP_KAFKA_USERNAME": "u", "SP_KAFKA_PASSWORD": "p"},
			yaml: `{}`,
			check: func(t *testing.T, c Config) {
				if got := strings.Join(c.SeedBrokers, ","); got != "localhost:19092" || c.TLS != nil || len(c.SASL) != 0 {
					t.Fatalf("got brokers %q tls %v sasl %v, want the defaults: the plugin read the environment", got, c.TLS, c.SASL)
				}
			},
		},
		{
			name: "yaml as the pipelines write it, interpolated",
			yaml: "seed_brokers: [ \"a:1, b:2\" ]\ntls:\n  enabled: true\n  root_cas_file: \"" + pki.caFile + "\"\n  client_certs: [ { cert_file: \"\", key_file: \"\" } ]\n" +
				"sasl: [ { mechanism: \"scram-sha-512\", username: \"u\", password: \"p\" } ]\n",
			check: func(t *testing.T, c Config) {
				if got := strings.Join(c.SeedBrokers, ","); got != "a:1,b:2" {
					t.Fatalf("brokers %q, want a:1,b:2", got)
				}
				if c.TLS == nil || c.TLS.RootCAs == nil || c.TLS.MinVersion != tls.VersionTLS12 {
					t.Fatalf("TLS %+v, want enabled with the CA and TLS 1.2 minimum", c.TLS)
				}
				if len(c.SASL) != 1 || c.SASL[0] != (SASL{MechanismScramSHA512, "u", "p"}) {
					t.Fatalf("SASL %+v, want SCRAM-SHA-512 u", c.SASL)
				}
			},
		},
		{
			name: "yaml overrides env",
			env:  map[string]string{"SP_KAFKA_SASL_MECHANISM": "PLAIN", "SP_KAFKA_USERNAME": "u", "SP_KAFKA_PASSWORD": "p"},
			yaml: "seed_brokers: [x:9]\nsasl: []\n",
			check: func(t *testing.T, c Config) {
				if len(c.SASL) != 0 || c.SeedBrokers[0] != "x:9" {
					t.Fatalf("got %+v, want x:9 without SASL", c)
				}
			},
		},
		{
			name:    "PLAIN without TLS refused from env",
			env:     map[string]string{"SP_KAFKA_SASL_MECHANISM": "PLAIN", "SP_KAFKA_USERNAME": "u", "SP_KAFKA_PASSWORD": "p"},
			wantErr: ErrPlainWithoutTLS,
			errText: "sends the password as-is",
		},
		{
			name:    "PLAIN without TLS refused from yaml",
			yaml:    "sasl: [{mechanism: PLAIN, username: u, password: p}]\n",
			wantErr: ErrPlainWithoutTLS,
		},
		{
			name: "PLAIN with TLS accepted",
			yaml: "tls: {enabled: true}\nsasl: [{mechanism: PLAIN, username: u, password: p}]\n",
			check: func(t *testing.T, c Config) {
				if c.TLS == nil || c.SASL[0].Mechanism != MechanismPlain {
					t.Fatalf("got %+v, want PLAIN over TLS", c)
				}
			},
		},
		{
			name:    "TLS 1.1 refused",
			yaml:    "tls: {enabled: true, min_version: '1.1'}\n",
			wantErr: ErrTLSVersion,
		},
		{
			name:    "TLS 1.0 refused, written the long way",
			yaml:    "tls: {enabled: true, min_version: 'TLS 1.0'}\n",
			wantErr: ErrTLSVersion,
		},
		{
			name:    "not a TLS version",
			yaml:    "tls: {enabled: true, min_version: 'SSLv3'}\n",
			errText: "not a TLS version",
		},
		{
			name: "TLS 1.3 accepted",
			yaml: "tls: {enabled: true, min_version: '1.3'}\n",
			check: func(t *testing.T, c Config) {
				if c.TLS.MinVersion != tls.VersionTLS13 {
					t.Fatalf("min version %x, want TLS 1.3", c.TLS.MinVersion)
				}
			},
		},
		{
			name:    "unknown mechanism",
			env:     map[string]string{"SP_KAFKA_SASL_MECHANISM": "GSSAPI", "SP_KAFKA_USERNAME": "u", "SP_KAFKA_PASSWORD": "p"},
			wantErr: ErrUnknownMechanism,
		},
		{
			name:    "mechanism without password",
			env:     map[string]string{"SP_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "SP_KAFKA_USERNAME": "u"},
			wantErr: ErrMissingCredentials,
		},
		{
			name:    "client cert while TLS is off",
			env:     map[string]string{"SP_KAFKA_TLS_CERT_FILE": pki.clientCert, "SP_KAFKA_TLS_KEY_FILE": pki.clientKey},
			wantErr: ErrTLSFilesWithoutTLS,
		},
		{
			name:    "client cert without key",
			env:     map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CERT_FILE": pki.clientCert},
			wantErr: ErrIncompleteClientCert,
		},
		{
			name: "mutual TLS from env",
			env:  map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CERT_FILE": pki.clientCert, "SP_KAFKA_TLS_KEY_FILE": pki.clientKey},
			check: func(t *testing.T, c Config) {
				if len(c.TLS.Certificates) != 1 {
					t.Fatalf("%d client certificates, want 1", len(c.TLS.Certificates))
				}
			},
		},
		{
			name:    "TLS enabled not a bool",
			env:     map[string]string{"SP_KAFKA_TLS_ENABLED": "yes please"},
			errText: "SP_KAFKA_TLS_ENABLED",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c Config
			var err error
			if tt.yaml == "" {
				c, err = FromEnv()
			} else {
				c, err = parse(t, tt.yaml)
			}
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil {
					t.Fatalf("got %+v, want an error", c)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("error %q does not say %q", err, tt.errText)
				}
				if strings.Contains(err.Error(), "p\"") || strings.Contains(err.Error(), "=p") {
					t.Fatalf("error %q leaks the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
			if _, err := c.ClientOpts(); err != nil {
				t.Fatalf("ClientOpts: %v", err)
			}
		})
	}
}

func TestClientOptsRefusesOldTLS(t *testing.T) {
	c := Config{SeedBrokers: []string{"x:1"}, TLS: &tls.Config{MinVersion: tls.VersionTLS11}}
	if _, err := c.ClientOpts(); !errors.Is(err, ErrTLSVersion) {
		t.Fatalf("ClientOpts with TLS 1.1 minimum: %v, want %v", err, ErrTLSVersion)
	}
	c = Config{SeedBrokers: []string{"x:1"}, SASL: []SASL{{MechanismPlain, "u", "p"}}}
	if _, err := c.ClientOpts(); !errors.Is(err, ErrPlainWithoutTLS) {
		t.Fatalf("ClientOpts with PLAIN over plaintext: %v, want %v", err, ErrPlainWithoutTLS)
	}
}

// roundTrip produces one record with conf and reads it back, the way every
// plugin will use the connection.
func roundTrip(t *testing.T, conf Config) error {
	t.Helper()
	opts, err := conf.ClientOpts()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("sec"), kgo.RecordRetries(2))...)
	if err != nil {
		return err
	}
	defer prod.Close()
	if err := conf.Check(ctx, prod); err != nil {
		return err
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("secret value")}).FirstErr(); err != nil {
		return err
	}
	cons, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("sec"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cons.Close()
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		var got string
		fs.EachRecord(func(r *kgo.Record) { got = string(r.Value) })
		if got == "secret value" {
			return nil
		}
	}
	return errors.New("record produced but never consumed")
}

func TestSecurityAgainstKfake(t *testing.T) {
	pki := newTestPKI(t)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12}
	mutualTLS := &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.caPool}

	tests := []struct {
		name    string
		cluster []kfake.Opt
		env     map[string]string
		errText string // "" means the round trip must work
	}{
		{
			name:    "SCRAM-SHA-512 over TLS",
			cluster: []kfake.Opt{kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "speculapro", "right-password")},
			env: map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CA_FILE": pki.caFile,
				"SP_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "SP_KAFKA_USERNAME": "speculapro", "SP_KAFKA_PASSWORD": "right-password"},
		},
		{
			name:    "wrong password",
			cluster: []kfake.Opt{kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "speculapro", "right-password")},
			env: map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CA_FILE": pki.caFile,
				"SP_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "SP_KAFKA_USERNAME": "speculapro", "SP_KAFKA_PASSWORD": "wrong-password"},
			// A real broker answers SASL_AUTHENTICATION_FAILED; kfake hangs up.
			errText: "check SP_KAFKA_USERNAME and SP_KAFKA_PASSWORD",
		},
		{
			name:    "broker certificate from an unknown CA",
			cluster: []kfake.Opt{kfake.TLS(serverTLS)},
			env:     map[string]string{"SP_KAFKA_TLS_ENABLED": "true"},
			errText: "certificate signed by unknown authority",
		},
		{
			name:    "mutual TLS with a client certificate",
			cluster: []kfake.Opt{kfake.TLS(mutualTLS)},
			env: map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CA_FILE": pki.caFile,
				"SP_KAFKA_TLS_CERT_FILE": pki.clientCert, "SP_KAFKA_TLS_KEY_FILE": pki.clientKey},
		},
		{
			name:    "mutual TLS without a client certificate",
			cluster: []kfake.Opt{kfake.TLS(mutualTLS)},
			env:     map[string]string{"SP_KAFKA_TLS_ENABLED": "true", "SP_KAFKA_TLS_CA_FILE": pki.caFile},
			errText: "certificate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "sec")}, tt.cluster...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			t.Setenv("SP_KAFKA_BROKERS", c.ListenAddrs()[0])
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			conf, err := FromEnv()
			if err != nil {
				t.Fatal(err)
			}
			err = roundTrip(t, conf)
			switch {
			case tt.errText == "" && err != nil:
				t.Fatalf("round trip: %v", err)
			case tt.errText != "" && err == nil:
				t.Fatal("round trip worked, want it refused")
			case tt.errText != "" && !strings.Contains(err.Error(), tt.errText):
				t.Fatalf("error %q does not say %q", err, tt.errText)
			}
			if err != nil && strings.Contains(err.Error(), "wrong-password") {
				t.Fatalf("error %q leaks the password", err)
			}
		})
	}
}

// Every pipeline hands its Kafka plugins the SP_KAFKA_* settings through
// the YAML, the same block everywhere, so `speculapro lint` and the engine's
// interpolation see them (the plugins read no environment).
func TestPipelinesCarryTheConnectionBlock(t *testing.T) {
	files, err := filepath.Glob("../../pipelines/*.yaml")
	examples, _ := filepath.Glob("../../config/examples/*.yaml")
	files = append(files, examples...)
	if err != nil || len(files) == 0 {
		t.Fatalf("no pipelines found: %v", err)
	}
	plugin := regexp.MustCompile(`(?m)^(\s*)(kafka_franz|ingest_api):\s*$`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		for _, m := range plugin.FindAllStringSubmatchIndex(text, -1) {
			indent := text[m[2]:m[3]] + "  "
			rest := text[m[1]+1:]
			if !strings.HasPrefix(rest, ConnectionYAML(indent)) {
				t.Errorf("%s: %s at offset %d does not start with the connection block:\n%s", f, text[m[4]:m[5]], m[0], ConnectionYAML(indent))
			}
		}
	}
}
