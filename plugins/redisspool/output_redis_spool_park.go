package redisspool

import (
	"context"
	"encoding/json"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"
)

// Park appends msgs to the spool of keyPrefix (a redis_spool's key_prefix),
// oldest first, in the form its replay reads: for decided transactions held
// outside a redis_spool's buffer, which the next replay of that spool (in
// this process or the next) then delivers. It returns the spool's length.
func Park(ctx context.Context, client goredis.UniversalClient, keyPrefix string, msgs service.MessageBatch) (int64, error) {
	entries := make([]*spoolEntry, len(msgs))
	for i, m := range msgs {
		e, err := entryOf(m)
		if err != nil {
			return 0, fmt.Errorf("redis_spool: reading a message to park: %w", err)
		}
		entries[i] = e
	}
	return pushEntries(ctx, client, keyPrefix+SpoolKey, entries)
}

// pushEntries appends entries to the spool list key, in order, and returns
// the list's length.
func pushEntries(ctx context.Context, client goredis.UniversalClient, key string, entries []*spoolEntry) (int64, error) {
	vals := make([]any, len(entries))
	for i, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			b = nil // an unreadable entry: its replay logs it LOST
		}
		vals[i] = b
	}
	n, err := client.RPush(ctx, key, vals...).Result()
	if err != nil {
		return 0, fmt.Errorf("redis_spool: appending %d entries to %s: %w", len(entries), key, err)
	}
	return n, nil
}
