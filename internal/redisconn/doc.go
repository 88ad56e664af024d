// Package redisconn opens the go-redis client of SP_REDIS_URL: one URL
// (redis://[user:pass@]host:port/db, or rediss:// for TLS) for a single
// Redis, several comma-separated URLs, or one URL with ?cluster=true, for the
// seed nodes of a Redis Cluster. Open does no I/O: the client connects on
// first use, so a pipeline starts even while Redis is down.
package redisconn
