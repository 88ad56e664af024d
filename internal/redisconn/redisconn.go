package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis logs its own connection failures to stderr, once per dial and
// unbounded; every error also reaches the caller, which logs it the
// SpeculaPro way (rate-limited, no secrets), so its logger is silenced.
func init() { redis.SetLogger(silent{}) }

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// dialerRetries: one dial per attempt. go-redis would otherwise dial five
// times with backoff inside every command, hiding an outage from the
// callers' own retry loops (and their logs) and slowing best-effort callers.
const dialerRetries = 1

// Open returns a *redis.Client for one URL and a *redis.ClusterClient for
// several comma-separated URLs or a URL with the query parameter
// cluster=true. Errors never quote the URL: it may hold a password.
func Open(rawURL string) (redis.UniversalClient, error) { return open(rawURL, false) }

// OpenNoBackoff is Open for a caller answering within a deadline shorter
// than go-redis's retries (a decision's 250 ms): a failed command is tried
// once more at once, for a pooled connection the server had closed, and
// never after a backoff sleep. go-redis's default of three retries sleeping
// 8-72 ms each spends up to 136 ms of every decision's budget on a Redis
// that is down, while the caller's own breaker already knows what to do.
func OpenNoBackoff(rawURL string) (redis.UniversalClient, error) { return open(rawURL, true) }

// clusterStateReload: how stale a Cluster client's map of slots may get.
const clusterStateReload = time.Second

// noBackoffRetries: one immediate retry (see OpenNoBackoff).
const noBackoffRetries = 1

func open(rawURL string, noBackoff bool) (redis.UniversalClient, error) {
	parts := strings.Split(strings.TrimSpace(rawURL), ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
		if parts[i] == "" {
			return nil, fmt.Errorf("redis URL: item %d of %d is empty", i+1, len(parts))
		}
	}
	cluster := len(parts) > 1
	if !cluster {
		var err error
		if parts[0], cluster, err = stripCluster(parts[0]); err != nil {
			return nil, err
		}
		if !cluster {
			opt, err := redis.ParseURL(parts[0])
			if err != nil {
				return nil, fmt.Errorf("redis URL: %w", scrub(err))
			}
			opt.DialerRetries = dialerRetries
			if noBackoff {
				opt.MaxRetries, opt.MinRetryBackoff = noBackoffRetries, -1 // -1: go-redis sleeps 0
			}
			return redis.NewClient(opt), nil
		}
	}
	// A Cluster has no databases and one set of credentials: the first URL
	// carries the options (go-redis reads user, password, TLS and timeouts
	// from it), the others add seed addresses.
	first := parts[0]
	if len(parts) > 1 {
		var err error
		if first, _, err = stripCluster(first); err != nil {
			return nil, err
		}
	}
	opt, err := redis.ParseClusterURL(first)
	if err != nil {
		return nil, fmt.Errorf("redis cluster URL 1: %w", scrub(err))
	}
	for i, p := range parts[1:] {
		p, _, err := stripCluster(p)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" || (u.Scheme != "redis" && u.Scheme != "rediss") {
			return nil, fmt.Errorf("redis cluster URL %d: want redis://host:port", i+2)
		}
		host := u.Host
		if u.Port() == "" {
			host += ":6379"
		}
		opt.Addrs = append(opt.Addrs, host)
	}
	opt.DialerRetries = dialerRetries
	// go-redis learns a failover from a MOVED answer, which a dead master
	// never gives: its slots would go to it until the next periodic reload
	// (60 s by default). One CLUSTER SLOTS a second, only while the client
	// is used, bounds that to about the failover itself.
	opt.ClusterStateReloadInterval = clusterStateReload
	if noBackoff {
		// The cluster client retries in its redirect loop (MaxRedirects,
		// default 3), sleeping 10-90 ms before each attempt that is not a
		// MOVED or ASK; its nodes do not retry. Only the sleeps go.
		opt.MinRetryBackoff = -1
	}
	return redis.NewClusterClient(opt), nil
}

// stripCluster removes a cluster=true|false query parameter and reports it.
func stripCluster(raw string) (string, bool, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, errors.New("redis URL: not a URL (want redis://[user:pass@]host:port/db)")
	}
	q := u.Query()
	v, ok := q["cluster"]
	if !ok {
		return raw, false, nil
	}
	q.Del("cluster")
	u.RawQuery = q.Encode()
	switch strings.ToLower(v[0]) {
	case "true", "1", "yes":
		return u.String(), true, nil
	case "false", "0", "no", "":
		return u.String(), false, nil
	}
	return "", false, errors.New("redis URL: cluster must be true or false")
}

// scrub drops go-redis's parse errors that would quote the URL (url.Error
// quotes it, password included) and keeps the others, which name options.
func scrub(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return errors.New("not a URL (want redis://[user:pass@]host:port/db)")
	}
	return err
}
