package kafkaconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/speculapro/speculapro/internal/config"
)

// Field names shared by every Kafka plugin. The shapes follow Connect's
// kafka_franz so a Connect YAML reads the same here.
const (
	FieldSeedBrokers = "seed_brokers"
	FieldTLS         = "tls"
	FieldSASL        = "sasl"

	fieldTLSEnabled     = "enabled"
	fieldTLSSkipVerify  = "skip_cert_verify"
	fieldTLSMinVersion  = "min_version"
	fieldTLSRootCAs     = "root_cas"
	fieldTLSRootCAsFile = "root_cas_file"
	fieldTLSClientCerts = "client_certs"
	fieldCertCert       = "cert"
	fieldCertKey        = "key"
	fieldCertCertFile   = "cert_file"
	fieldCertKeyFile    = "key_file"

	fieldSASLMechanism = "mechanism"
	fieldSASLUsername  = "username"
	fieldSASLPassword  = "password"
)

// SASL mechanisms SpeculaPro speaks.
const (
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismPlain       = "PLAIN"
)

// Errors a connection's settings are refused with. They are returned wrapped
// with the setting that caused them; match them with errors.Is.
var (
	// ErrPlainWithoutTLS refuses SASL PLAIN on a plaintext connection,
	// because PLAIN sends the password as-is.
	ErrPlainWithoutTLS = errors.New("SASL mechanism PLAIN sends the password as-is, so it is refused without TLS: enable TLS (SP_KAFKA_TLS_ENABLED=true, or tls.enabled: true) or use SCRAM-SHA-512")
	// ErrTLSVersion refuses a TLS configuration that would allow a
	// version older than TLS 1.2.
	ErrTLSVersion = errors.New("TLS 1.2 is the minimum version SpeculaPro accepts")
	// ErrUnknownMechanism refuses a SASL mechanism other than
	// SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN.
	ErrUnknownMechanism = errors.New("unknown SASL mechanism: use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN")
	// ErrMissingCredentials refuses a SASL mechanism without a user name
	// or password.
	ErrMissingCredentials = errors.New("SASL needs both a user name (SP_KAFKA_USERNAME) and a password (SP_KAFKA_PASSWORD)")
	// ErrTLSFilesWithoutTLS refuses certificate files while TLS is off:
	// the user meant to encrypt, and a plaintext connection would betray it.
	ErrTLSFilesWithoutTLS = errors.New("TLS certificate files are set but TLS is not enabled: set SP_KAFKA_TLS_ENABLED=true (tls.enabled: true)")
	// ErrIncompleteClientCert refuses a client certificate without its
	// key, or a key without its certificate.
	ErrIncompleteClientCert = errors.New("a client certificate needs both its certificate and its private key")
	// ErrNoBrokers refuses a connection without any seed broker.
	ErrNoBrokers = errors.New("no seed brokers: set SP_KAFKA_BROKERS (seed_brokers)")
)

// SASL is one SASL mechanism with its credentials.
type SASL struct {
	Mechanism string
	Username  string
	Password  string
}

// Config is a resolved connection: where the brokers are and how to talk to
// them. A nil TLS means plaintext; an empty SASL means no authentication.
// Build it with FromParsed or FromEnv, which refuse unsafe settings.
type Config struct {
	SeedBrokers []string
	TLS         *tls.Config
	SASL        []SASL
}

// Fields returns the connection fields every Kafka plugin embeds in its spec.
// A plugin never reads the environment: the pipelines set these fields to
// the SP_KAFKA_* settings with ${SP_KAFKA_…:default} (ConnectionYAML), so
// `speculapro lint` and the engine see every one; a field left out takes
// the settings' documented default.
func Fields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringListField(FieldSeedBrokers).
			Description("Addresses of Kafka brokers to connect to first. Each item may hold several comma-separated addresses. The pipelines set it to `${SP_KAFKA_BROKERS:localhost:19092}`.").
			Example([]string{"localhost:19092"}).
			Default([]any{config.KafkaBrokers.Default}),
		service.NewObjectField(FieldTLS,
			service.NewBoolField(fieldTLSEnabled).
				Description("Whether to connect with TLS. The pipelines set it to `${SP_KAFKA_TLS_ENABLED:false}`.").
				Default(false),
			service.NewBoolField(fieldTLSSkipVerify).
				Description("Whether to skip verifying the brokers' certificates. Only for testing.").
				Advanced().Default(false),
			service.NewStringField(fieldTLSMinVersion).
				Description("Oldest TLS version to accept: `1.2` or `1.3`. Anything older than 1.2 is refused.").
				Advanced().Example("1.3").Default("1.2"),
			service.NewStringField(fieldTLSRootCAs).
				Description("PEM text of the certificate authority that signed the brokers' certificates, when it is a private one.").
				Advanced().Secret().Default(""),
			service.NewStringField(fieldTLSRootCAsFile).
				Description("Path of a PEM file of the certificate authority that signed the brokers' certificates, when it is a private one. The pipelines set it to `${SP_KAFKA_TLS_CA_FILE:}`.").
				Example("./ca.pem").Default(""),
			service.NewObjectListField(fieldTLSClientCerts,
				service.NewStringField(fieldCertCert).Description("PEM text of a client certificate.").Default(""),
				service.NewStringField(fieldCertKey).Description("PEM text of the client certificate's private key.").Secret().Default(""),
				service.NewStringField(fieldCertCertFile).Description("Path of a PEM client certificate.").Default(""),
				service.NewStringField(fieldCertKeyFile).Description("Path of the client certificate's PEM private key.").Default(""),
			).
				Description("Client certificates for mutual TLS: either `cert` and `key`, or `cert_file` and `key_file`. The pipelines set one entry from `SP_KAFKA_TLS_CERT_FILE` and `SP_KAFKA_TLS_KEY_FILE`; an entry with nothing set is ignored.").
				Default([]any{}),
		).Description("TLS settings. TLS 1.2 is the minimum version accepted."),
		service.NewObjectListField(FieldSASL,
			service.NewStringField(fieldSASLMechanism).
				Description("`SCRAM-SHA-512` (recommended), `SCRAM-SHA-256` or `PLAIN` (only with TLS). Empty for none."),
			service.NewStringField(fieldSASLUsername).Description("SASL user name.").Default(""),
			service.NewStringField(fieldSASLPassword).Description("SASL password.").Secret().Default(""),
		).
			Description("SASL authentication. The pipelines set one entry from `SP_KAFKA_SASL_MECHANISM`, `SP_KAFKA_USERNAME` and `SP_KAFKA_PASSWORD`; an entry with an empty mechanism is ignored.").
			Example([]any{map[string]any{fieldSASLMechanism: MechanismScramSHA512, fieldSASLUsername: "speculapro", fieldSASLPassword: "${SP_KAFKA_PASSWORD:}"}}).
			Default([]any{}),
	}
}

// tlsSettings is the TLS part of a connection before files are read.
type tlsSettings struct {
	enabled     bool
	skipVerify  bool
	minVersion  string
	rootCAs     string
	rootCAsFile string
	certs       []certSettings
}

type certSettings struct {
	cert, key, certFile, keyFile string
}

// FromParsed reads the connection fields of a plugin's parsed config,
// refusing unsafe settings.
func FromParsed(conf *service.ParsedConfig) (Config, error) {
	brokers, err := conf.FieldStringList(FieldSeedBrokers)
	if err != nil {
		return Config{}, err
	}

	var ts tlsSettings
	if conf.Contains(FieldTLS) {
		tc := conf.Namespace(FieldTLS)
		if ts.enabled, err = tc.FieldBool(fieldTLSEnabled); err != nil {
			return Config{}, err
		}
		if ts.skipVerify, err = tc.FieldBool(fieldTLSSkipVerify); err != nil {
			return Config{}, err
		}
		if ts.minVersion, err = stringField(tc, fieldTLSMinVersion); err != nil {
			return Config{}, err
		}
		if ts.rootCAs, err = stringField(tc, fieldTLSRootCAs); err != nil {
			return Config{}, err
		}
		if ts.rootCAsFile, err = stringField(tc, fieldTLSRootCAsFile); err != nil {
			return Config{}, err
		}
		certs, err := tc.FieldObjectList(fieldTLSClientCerts)
		if err != nil {
			return Config{}, err
		}
		for _, c := range certs {
			var cs certSettings
			for _, f := range []struct {
				name string
				dst  *string
			}{{fieldCertCert, &cs.cert}, {fieldCertKey, &cs.key}, {fieldCertCertFile, &cs.certFile}, {fieldCertKeyFile, &cs.keyFile}} {
				if *f.dst, err = stringField(c, f.name); err != nil {
					return Config{}, err
				}
			}
			ts.certs = append(ts.certs, cs)
		}
	}

	var sasls []SASL
	if conf.Contains(FieldSASL) {
		list, err := conf.FieldObjectList(FieldSASL)
		if err != nil {
			return Config{}, err
		}
		for _, s := range list {
			var m SASL
			if m.Mechanism, err = stringField(s, fieldSASLMechanism); err != nil {
				return Config{}, err
			}
			if m.Username, err = stringField(s, fieldSASLUsername); err != nil {
				return Config{}, err
			}
			if m.Password, err = stringField(s, fieldSASLPassword); err != nil {
				return Config{}, err
			}
			sasls = append(sasls, m)
		}
	}
	return build(brokers, ts, sasls)
}

// ConnectionYAML is the connection block every pipeline carries, at the
// given indent, so the settings reach the plugins through the YAML.
func ConnectionYAML(indent string) string {
	lines := []string{
		`# Connection settings (SP_KAFKA_*), the same block in every pipeline.`,
		`seed_brokers: [ "${SP_KAFKA_BROKERS:` + config.KafkaBrokers.Default + `}" ]`,
		`tls:`,
		`  enabled: ${SP_KAFKA_TLS_ENABLED:false}`,
		`  root_cas_file: "${SP_KAFKA_TLS_CA_FILE:}"`,
		`  client_certs: [ { cert_file: "${SP_KAFKA_TLS_CERT_FILE:}", key_file: "${SP_KAFKA_TLS_KEY_FILE:}" } ]`,
		`sasl: [ { mechanism: "${SP_KAFKA_SASL_MECHANISM:}", username: "${SP_KAFKA_USERNAME:}", password: "${SP_KAFKA_PASSWORD:}" } ]`,
	}
	return indent + strings.Join(lines, "\n"+indent) + "\n"
}

// FromEnv reads the connection from the SP_KAFKA_* settings, for commands
// (topics, loadgen), refusing unsafe settings.
func FromEnv() (Config, error) {
	enabled, err := parseBool(config.KafkaTLSEnabled.Name, config.KafkaTLSEnabled.Value())
	if err != nil {
		return Config{}, err
	}
	ts := tlsSettings{
		enabled:     enabled,
		minVersion:  "1.2",
		rootCAsFile: config.KafkaTLSCAFile.Value(),
		certs: []certSettings{{
			certFile: config.KafkaTLSCertFile.Value(),
			keyFile:  config.KafkaTLSKeyFile.Value(),
		}},
	}
	sasls := []SASL{{
		Mechanism: config.KafkaSASLMechanism.Value(),
		Username:  config.KafkaUsername.Value(),
		Password:  config.KafkaPassword.Value(),
	}}
	return build([]string{config.KafkaBrokers.Value()}, ts, sasls)
}

func build(brokers []string, ts tlsSettings, sasls []SASL) (Config, error) {
	c := Config{SeedBrokers: splitBrokers(brokers)}
	if len(c.SeedBrokers) == 0 {
		return Config{}, ErrNoBrokers
	}
	var err error
	if c.TLS, err = ts.load(); err != nil {
		return Config{}, fmt.Errorf("kafka TLS settings: %w", err)
	}
	for _, s := range sasls {
		s.Mechanism = strings.ToUpper(strings.TrimSpace(s.Mechanism))
		if s.Mechanism == "" {
			continue
		}
		c.SASL = append(c.SASL, s)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// load reads the certificate files and builds the TLS config, nil when TLS
// is off.
func (ts tlsSettings) load() (*tls.Config, error) {
	var certs []certSettings
	for _, c := range ts.certs {
		if c != (certSettings{}) {
			certs = append(certs, c)
		}
	}
	if !ts.enabled {
		if ts.rootCAs != "" || ts.rootCAsFile != "" || len(certs) > 0 {
			return nil, ErrTLSFilesWithoutTLS
		}
		return nil, nil
	}
	min, err := parseTLSVersion(ts.minVersion)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: min, InsecureSkipVerify: ts.skipVerify} //nolint:gosec // skip_cert_verify is an explicit, documented test-only opt-in
	if ts.rootCAs != "" || ts.rootCAsFile != "" {
		pem := []byte(ts.rootCAs)
		if ts.rootCAsFile != "" {
			if pem, err = os.ReadFile(ts.rootCAsFile); err != nil {
				return nil, fmt.Errorf("reading CA file: %w", err)
			}
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA %q holds no PEM certificate", ts.rootCAsFile)
		}
	}
	for _, c := range certs {
		var cert tls.Certificate
		switch {
		case c.certFile != "" && c.keyFile != "" && c.cert == "" && c.key == "":
			if cert, err = tls.LoadX509KeyPair(c.certFile, c.keyFile); err != nil {
				return nil, fmt.Errorf("loading client certificate %s: %w", c.certFile, err)
			}
		case c.cert != "" && c.key != "" && c.certFile == "" && c.keyFile == "":
			if cert, err = tls.X509KeyPair([]byte(c.cert), []byte(c.key)); err != nil {
				return nil, fmt.Errorf("parsing client certificate: %w", err)
			}
		default:
			return nil, ErrIncompleteClientCert
		}
		tc.Certificates = append(tc.Certificates, cert)
	}
	return tc, nil
}

// Validate refuses settings that would weaken the connection: a TLS version
// below 1.2, PLAIN without TLS, an unknown mechanism or missing credentials.
func (c Config) Validate() error {
	if len(c.SeedBrokers) == 0 {
		return ErrNoBrokers
	}
	if c.TLS != nil && c.TLS.MinVersion != 0 && c.TLS.MinVersion < tls.VersionTLS12 {
		return fmt.Errorf("kafka TLS min_version %s: %w", tls.VersionName(c.TLS.MinVersion), ErrTLSVersion)
	}
	for _, s := range c.SASL {
		switch s.Mechanism {
		case MechanismScramSHA512, MechanismScramSHA256:
		case MechanismPlain:
			if c.TLS == nil {
				return fmt.Errorf("kafka SASL: %w", ErrPlainWithoutTLS)
			}
		default:
			return fmt.Errorf("kafka SASL mechanism %q: %w", s.Mechanism, ErrUnknownMechanism)
		}
		if s.Username == "" || s.Password == "" {
			return fmt.Errorf("kafka SASL %s: %w", s.Mechanism, ErrMissingCredentials)
		}
	}
	return nil
}

// ClientOpts turns the connection into franz-go options. It validates again
// so that a Config built by hand cannot bypass the rules.
func (c Config) ClientOpts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.SeedBrokers...)}
	if c.TLS != nil {
		tc := c.TLS.Clone()
		// Go's client default is already 1.2, but a zero MinVersion would
		// follow whatever a future Go release or GODEBUG decides.
		if tc.MinVersion == 0 {
			tc.MinVersion = tls.VersionTLS12
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	var mechs []sasl.Mechanism
	for _, s := range c.SASL {
		switch s.Mechanism {
		case MechanismScramSHA512:
			mechs = append(mechs, scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism())
		case MechanismScramSHA256:
			mechs = append(mechs, scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism())
		case MechanismPlain:
			mechs = append(mechs, plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism())
		}
	}
	if len(mechs) > 0 {
		opts = append(opts, kgo.SASL(mechs...))
	}
	return opts, nil
}

// Check connects to a seed broker and explains a failure in terms of the
// settings a user can change. franz-go only dials when a request needs it,
// so without this a wrong password would surface as a stalled write.
func (c Config) Check(ctx context.Context, cl *kgo.Client) error {
	err := cl.Ping(ctx)
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("connecting to Kafka at %s", strings.Join(c.SeedBrokers, ","))
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%s: authentication failed, check SP_KAFKA_USERNAME and SP_KAFKA_PASSWORD (sasl): %w", where, err)
	case len(c.SASL) > 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		// Brokers may drop the connection instead of answering a failed
		// SASL exchange.
		return fmt.Errorf("%s: the broker closed the connection while authenticating with %s, check SP_KAFKA_USERNAME and SP_KAFKA_PASSWORD (sasl) and whether the broker expects TLS: %w", where, c.SASL[0].Mechanism, err)
	case c.TLS == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("%s: the broker closed the connection, does it expect TLS (SP_KAFKA_TLS_ENABLED)?: %w", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// stringField reads a string field, "" when absent: the entries of a list
// carry only the keys written in them, not their children's defaults.
func stringField(c *service.ParsedConfig, name string) (string, error) {
	if !c.Contains(name) {
		return "", nil
	}
	return c.FieldString(name)
}

func parseBool(name, s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", name, s)
	}
	return b, nil
}

// parseTLSVersion reads "1.2", "1.3" or "TLS 1.2" style versions.
func parseTLSVersion(s string) (uint16, error) {
	v := strings.TrimSpace(strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "TLS"))
	switch strings.TrimPrefix(v, "V") {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	case "1.0", "1.1":
		return 0, fmt.Errorf("min_version %s: %w", s, ErrTLSVersion)
	default:
		return 0, fmt.Errorf("min_version %q: not a TLS version (use 1.2 or 1.3)", s)
	}
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
