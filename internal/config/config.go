package config

import (
	"os"
	"sort"
	"strconv"
)

// Setting is one SP_* environment variable with its default and when to change it.
type Setting struct {
	Name    string
	Default string
	Help    string
}

// Value returns the environment's value for the setting, or its default when
// the variable is unset or empty.
func (s Setting) Value() string {
	if v, ok := os.LookupEnv(s.Name); ok && v != "" {
		return v
	}
	return s.Default
}

// DefaultInt is the default of a whole-number setting, for a component
// field of int type (whose default must be an int, not its text). It panics
// on a default that is not a whole number: a fault in this file that every
// test run meets.
func (s Setting) DefaultInt() int {
	n, err := strconv.Atoi(s.Default)
	if err != nil {
		panic("config: " + s.Name + "'s default is not a whole number: " + s.Default)
	}
	return n
}

// IsSet reports whether the environment sets the variable to a non-empty value.
func (s Setting) IsSet() bool {
	v, ok := os.LookupEnv(s.Name)
	return ok && v != ""
}

// Every SP_* setting. Pipelines read the same names through the engine's
// ${NAME:default} interpolation; TestPipelinesUseDocumentedDefaults keeps the
// two in step.
var (
	KafkaBrokers           = Setting{"SP_KAFKA_BROKERS", "localhost:19092", "Comma-separated seed brokers. Unset under `speculapro dev` to use the embedded broker"}
	KafkaTLSEnabled        = Setting{"SP_KAFKA_TLS_ENABLED", "false", "Set to true when the brokers speak TLS (TLS 1.2 minimum)"}
	KafkaTLSCAFile         = Setting{"SP_KAFKA_TLS_CA_FILE", "", "PEM file of the CA that signed the brokers' certificates, when it is a private CA"}
	KafkaTLSCertFile       = Setting{"SP_KAFKA_TLS_CERT_FILE", "", "Client certificate (PEM) for mutual TLS; set together with SP_KAFKA_TLS_KEY_FILE"}
	KafkaTLSKeyFile        = Setting{"SP_KAFKA_TLS_KEY_FILE", "", "Client private key (PEM) for mutual TLS"}
	KafkaSASLMechanism     = Setting{"SP_KAFKA_SASL_MECHANISM", "", "SCRAM-SHA-512 (recommended), SCRAM-SHA-256 or PLAIN (PLAIN only with TLS); empty for no SASL"}
	KafkaUsername          = Setting{"SP_KAFKA_USERNAME", "", "SASL user name"}
	KafkaPassword          = Setting{"SP_KAFKA_PASSWORD", "", "SASL password"}
	KafkaTopicPrefix       = Setting{"SP_KAFKA_TOPIC_PREFIX", "sp.", "Prefix of every topic name; give each environment sharing a cluster its own"}
	KafkaPartitions        = Setting{"SP_KAFKA_PARTITIONS", "64", "Partitions per topic created by `speculapro topics`; choose before go-live, 3-6 on a laptop"}
	KafkaReplicationFactor = Setting{"SP_KAFKA_REPLICATION_FACTOR", "-1", "Replicas per partition for new topics; -1 is the broker's default, use 3 in production"}

	DBURL       = Setting{"SP_DB_URL", "postgres://speculapro_app:speculapro_app@127.0.0.1:5432/speculapro?sslmode=disable", "PostgreSQL URL of the speculapro_app role (row-level security applies)"}
	DBSystemURL = Setting{"SP_DB_SYSTEM_URL", "", "PostgreSQL URL of speculapro_system (BYPASSRLS) for persist, stream and worker; defaults to SP_DB_URL"}
	DBOwnerURL  = Setting{"SP_DB_OWNER_URL", "postgres://speculapro_owner:speculapro_owner@127.0.0.1:5432/speculapro?sslmode=disable", "PostgreSQL URL of speculapro_owner, the only role that runs migrations"}

	DBSuperuserURL = Setting{"SP_DB_SUPERUSER_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable", "Superuser URL used only by `speculapro migrate --bootstrap` (and the tests) to create roles and the database"}

	RedisURL = Setting{"SP_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis for the running totals (stream and decision API), the ingest API's resend check, remembered decisions and the decision spool: redis://[user:pass@]host:port/db, or a Redis Cluster's seed nodes as comma-separated URLs (or one URL with ?cluster=true)"}

	RedisKeyPrefix = Setting{"SP_REDIS_KEY_PREFIX", "sp:", "Prefix of every Redis key but the decision spool's (SP_DECISION_SPOOL_PREFIX): the running totals, the ingest API's resend check, remembered decisions; give each environment (or test) sharing one Redis its own"}

	RedisReplicasToWait     = Setting{"SP_REDIS_REPLICAS_TO_WAIT", "0", "Replicas of each written Redis node that must hold the stream's running-total writes before its Kafka offsets are committed (Redis WAIT); 1 on a Redis Cluster with replicas, so a failover takes back nothing already committed; 0 on a Redis without replicas"}
	RedisReplicaWaitTimeout = Setting{"SP_REDIS_REPLICA_WAIT_TIMEOUT", "2s", "How long one attempt at a stream batch waits for SP_REDIS_REPLICAS_TO_WAIT replicas; a shortfall retries the batch (counted once)"}

	PersistGroup    = Setting{"SP_PERSIST_GROUP", "speculapro-persist", "Consumer group of the persister; renaming it replays the whole topic"}
	PersistWorkers  = Setting{"SP_PERSIST_WORKERS", "4", "Concurrent writers per persist process; raise when consumer lag keeps growing"}
	PersistBatchMax = Setting{"SP_PERSIST_BATCH_MAX", "5000", "Most records written in one database transaction"}
	StreamGroup     = Setting{"SP_STREAM_GROUP", "speculapro-stream", "Consumer group of the stream evaluator (its account-event twin adds -events); renaming it replays the whole topic and inflates the running totals beyond SP_STREAM_REPLAY_TTL"}
	StreamReplayTTL = Setting{"SP_STREAM_REPLAY_TTL", "30m", "How long the stream remembers it has counted an event, so a replay inside it changes no running total; beyond it a replayed event counts again"}

	WorkerPartitionsAhead = Setting{"SP_WORKER_PARTITIONS_AHEAD", "3", "Months after the current one whose transactions and account_events partitions the worker keeps created (checked at start and hourly)"}
	WorkerSenders         = Setting{"SP_WORKER_SENDERS", "4", "Batch slots of one worker: it sends up to 100 outbox rows per slot at once, each recorded as it ends; add workers to share the load further"}
	WorkerLease           = Setting{"SP_WORKER_LEASE", "2m", "How long a claimed outbox row is held by its worker; a row of a worker that died is sent again once it runs out. Must exceed SP_WEBHOOK_TIMEOUT"}
	WebhookTimeout        = Setting{"SP_WEBHOOK_TIMEOUT", "10s", "Longest one webhook, notification or email attempt may take, connecting included"}
	WebhookMaxAttempts    = Setting{"SP_WEBHOOK_MAX_ATTEMPTS", "12", "Attempts per webhook delivery or notification before it is marked failed (12 with the default backoff: about 3 days)"}
	WebhookBackoffInitial = Setting{"SP_WEBHOOK_BACKOFF_INITIAL", "5m", "Wait before a delivery's second attempt; it doubles per attempt (with 20 % jitter) up to SP_WEBHOOK_BACKOFF_MAX"}
	WebhookBackoffMax     = Setting{"SP_WEBHOOK_BACKOFF_MAX", "24h", "Longest wait between two attempts at a delivery"}
	WebhookSuspendAfter   = Setting{"SP_WEBHOOK_SUSPEND_AFTER", "20", "Deliveries failed in a row (every attempt used) after which an endpoint is suspended (disabled, with the reason); 0 never suspends on a count"}
	WebhookSuspendFailing = Setting{"SP_WEBHOOK_SUSPEND_AFTER_FAILING", "120h", "How long an endpoint may fail every attempt (no 2xx since its first failure) before it is suspended; 0s never suspends on time"}
	WebhookEndpointLimit  = Setting{"SP_WEBHOOK_ENDPOINT_CONCURRENCY", "4", "Most deliveries of one webhook endpoint in flight at once, across all workers: what one slow or hanging endpoint can hold"}
	WebhookTenantLimit    = Setting{"SP_WEBHOOK_WORKSPACE_CONCURRENCY", "16", "Most deliveries of one workspace's webhook endpoints together in flight at once: what one tenant's slow or hanging endpoints can hold"}
	WebhookSecretGrace    = Setting{"SP_WEBHOOK_SECRET_GRACE", "24h", "How long `speculapro webhook rotate-secret` keeps the old secret signing beside the new one"}
	WebhookAllowInsecure  = Setting{"SP_WEBHOOK_ALLOW_INSECURE", "false", "true allows http:// and loopback webhook URLs (never private or link-local ranges: see SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS): local stacks and tests only; production accepts only https:// to public addresses"}
	WebhookAllowPrivate   = Setting{"SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS", "", "Comma-separated CIDR ranges of your own network webhooks may reach although not public, e.g. 10.20.0.0/16,fd00:20::/48; only those ranges, never loopback (SP_WEBHOOK_ALLOW_INSECURE's alone)"}
	WebhookLegacyHeaders  = Setting{"SP_WEBHOOK_LEGACY_HEADERS", "true", "true also sends the previous signing scheme's Idempotency-Key and X-SpeculaPro-Signature beside the Standard Webhooks headers, for receivers not yet verifying webhook-signature (until 2027-06-30); set false once every receiver does"}
	SMTPURL               = Setting{"SP_SMTP_URL", "", "Mail server for email notifications: smtp://[user:pass@]host[:587]?from=alerts@example.com (STARTTLS required; &ca_file=/path.pem for a private CA); empty: email notifications fail with that reason"}

	EncryptionKey  = Setting{"SP_ENCRYPTION_KEY", "", "AES-256 key ring for identifiers: <key-id>:<64 hex chars>, comma-separated, first encrypts, all decrypt (rotation); required outside `speculapro dev`"}
	FingerprintKey = Setting{"SP_FINGERPRINT_KEY", "", "Fingerprint key: [<version>:]<64+ hex chars> (version 1 when omitted); each workspace fingerprints under a key derived from it; rotate only as docs/operations.md says (rotating the keys)"}

	IngestIdempotencyTTL = Setting{"SP_INGEST_IDEMPOTENCY_TTL", "24h", "How long Redis keeps each accepted external_id's first ID for the ingest API (about 136 bytes each); at least the ingest topics' retention (Kafka's default is 168h)"}

	IngestAddr          = Setting{"SP_INGEST_ADDR", "127.0.0.1:8080", "Address the ingest API (pipelines/ingest.yaml) listens on"}
	HTTPAddr            = Setting{"SP_HTTP_ADDR", "127.0.0.1:4195", "Address of the engine's HTTP server (/metrics, /ping, /ready)"}
	DataDir             = Setting{"SP_DATA_DIR", "./.speculapro", "Where `speculapro dev` keeps its embedded broker's data"}
	LogLevel            = Setting{"SP_LOG_LEVEL", "INFO", "Log level: ERROR, WARN, INFO, DEBUG, TRACE or NONE; DEBUG when chasing a problem"}
	CaseAddr            = Setting{"SP_CASE_ADDR", "127.0.0.1:8084", "Address the case API (pipelines/cases.yaml) listens on"}
	CaseMaxConns        = Setting{"SP_CASE_MAX_CONNECTIONS", "8", "PostgreSQL connections the case API holds at most; raise it when requests wait for one (its latency grows while PostgreSQL is idle)"}
	CaseQueryTimeout    = Setting{"SP_CASE_QUERY_TIMEOUT", "5s", "Longest one case API request may wait for PostgreSQL; beyond it 503 with Retry-After"}
	DecisionAddr        = Setting{"SP_DECISION_ADDR", "127.0.0.1:8082", "Address the decision API (pipelines/decision.yaml) listens on"}
	DecisionTimeout     = Setting{"SP_DECISION_TIMEOUT", "250ms", "Every decision is answered within this of the request's arrival; when the rules or Redis cannot finish in time the answer is SP_DECISION_FALLBACK, marked degraded"}
	DecisionFallback    = Setting{"SP_DECISION_FALLBACK", "review", "Outcome answered (degraded: true) when a decision cannot finish in time: approve, review or decline"}
	DecisionRemember    = Setting{"SP_DECISION_REMEMBER", "24h", "How long Redis remembers a decision, so the same external_id again gets the same answer"}
	DecisionBufferCount = Setting{"SP_DECISION_BUFFER_COUNT", "100000", "Most decided transactions waiting in memory (up to 30 s) for Kafka before more go straight to the Redis spool"}
	DecisionBufferBytes = Setting{"SP_DECISION_BUFFER_BYTES", "268435456", "Most bytes of decided transactions waiting in memory for Kafka (256 MiB)"}
	DecisionSpoolPrefix = Setting{"SP_DECISION_SPOOL_PREFIX", "", "Prefix of the spool list spool:{decisions}; give each environment sharing one Redis its own"}
	DecisionMaxActive   = Setting{"SP_DECISION_MAX_ACTIVE_REQUESTS", "256", "Most decision requests worked on at once by one process; beyond it 503 with Retry-After"}
	DecisionClientConns = Setting{"SP_DECISION_MAX_CLIENT_CONNECTIONS", "1024", "Most client connections one decision process holds open; beyond it new connections wait in the kernel's accept queue, so an overload cannot grow the process's memory with connections"}
	DecisionWSShare     = Setting{"SP_DECISION_WORKSPACE_SHARE", "0.125", "Share (0 to 1) of SP_DECISION_MAX_ACTIVE_REQUESTS one workspace may take (32 of 256); a request beyond it waits up to half SP_DECISION_TIMEOUT for one of its workspace's to end, then is answered 429 with Retry-After; the other workspaces are unaffected"}

	IngestWSShare       = Setting{"SP_INGEST_WORKSPACE_SHARE", "0.5", "Share (0 to 1) of the ingest API's in-flight body budget (32 MiB) one workspace's requests may announce; beyond it that workspace is answered 429 with Retry-After, the others unaffected"}
	IngestKeyShare      = Setting{"SP_INGEST_API_KEY_SHARE", "0.25", "Share (0 to 1) of the ingest API's in-flight body budget one API key's requests may announce; beyond it 429 with Retry-After"}
	IngestMinBodyRate   = Setting{"SP_INGEST_MIN_BODY_RATE", "16384", "Slowest an ingest request body may arrive, in bytes a second over each SP_INGEST_MIN_BODY_RATE_WINDOW; a slower one is answered 408 and its connection closed (0: no minimum)"}
	IngestMinRateWindow = Setting{"SP_INGEST_MIN_BODY_RATE_WINDOW", "5s", "How long an ingest request body may stall or trickle below SP_INGEST_MIN_BODY_RATE before it is cut off"}

	MemoryLimit       = Setting{"SP_MEMORY_LIMIT", "150MiB", "The Go runtime's soft memory limit of an ingest, persist, decision or worker process (keeps it under 200 MB resident at full speed); GOMEMLIMIT in the environment replaces it, as it does every role's"}
	StreamMemoryLimit = Setting{"SP_STREAM_MEMORY_LIMIT", "300MiB", "The soft memory limit of a stream process, raised to 1.5 times its live heap when that is more; below about 1.4 times the live heap the collector runs nearly all the time (docs/running-totals.md)"}
	IngestGOGC        = Setting{"SP_INGEST_GOGC", "300", "The ingest role's GOGC: its live heap is small, so a higher GOGC collects less often under the same memory limit; GOGC in the environment replaces it"}
)

// All returns every setting, sorted by name.
func All() []Setting {
	all := []Setting{
		KafkaBrokers, KafkaTLSEnabled, KafkaTLSCAFile, KafkaTLSCertFile, KafkaTLSKeyFile,
		KafkaSASLMechanism, KafkaUsername, KafkaPassword, KafkaTopicPrefix, KafkaPartitions,
		KafkaReplicationFactor, DBURL, DBSystemURL, DBOwnerURL, DBSuperuserURL, RedisURL, RedisKeyPrefix, RedisReplicasToWait, RedisReplicaWaitTimeout, PersistGroup,
		PersistWorkers, PersistBatchMax, StreamGroup, StreamReplayTTL, EncryptionKey, FingerprintKey,
		HTTPAddr, DataDir, LogLevel, IngestAddr, IngestIdempotencyTTL,
		WorkerPartitionsAhead, WorkerSenders, WorkerLease, WebhookTimeout, WebhookMaxAttempts,
		WebhookBackoffInitial, WebhookBackoffMax, WebhookSuspendAfter, WebhookSuspendFailing, WebhookEndpointLimit, WebhookTenantLimit, WebhookSecretGrace,
		WebhookAllowInsecure, WebhookAllowPrivate, WebhookLegacyHeaders, SMTPURL,
		CaseAddr, CaseMaxConns, CaseQueryTimeout, DecisionAddr, DecisionTimeout, DecisionFallback, DecisionRemember, DecisionBufferCount, DecisionBufferBytes, DecisionSpoolPrefix,
		DecisionMaxActive, DecisionClientConns, DecisionWSShare, IngestWSShare, IngestKeyShare, IngestMinBodyRate, IngestMinRateWindow,
		MemoryLimit, StreamMemoryLimit, IngestGOGC,
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}
