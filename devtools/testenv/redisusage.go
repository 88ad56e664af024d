package testenv

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisUsage is what the Redis servers behind a client have spent so far,
// summed over every master: CPU (INFO cpu, user + system) and, per command,
// calls and microseconds (INFO commandstats, which counts a script's own
// commands under their names as well as the whole call under evalsha). A
// benchmark reads it before and after and reports the difference per
// operation; other clients of the same servers count too, so a precise
// figure wants a Redis of the benchmark's own (SP_REDIS_URL).
type RedisUsage struct {
	CPU      time.Duration
	Commands map[string]RedisCommandUsage
}

// RedisCommandUsage is one command's calls and time in INFO commandstats.
type RedisCommandUsage struct {
	Calls, Usec int64
}

// ReadRedisUsage reads c's servers' RedisUsage, failing t when one does
// not answer.
func ReadRedisUsage(t testing.TB, c redis.UniversalClient) RedisUsage {
	t.Helper()
	ctx := context.Background()
	u := RedisUsage{Commands: map[string]RedisCommandUsage{}}
	var mu sync.Mutex
	one := func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "cpu", "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			switch {
			case k == "used_cpu_user" || k == "used_cpu_sys":
				f, _ := strconv.ParseFloat(v, 64)
				u.CPU += time.Duration(f * 1e9)
			case strings.HasPrefix(k, "cmdstat_"):
				var cu RedisCommandUsage
				for _, kv := range strings.Split(v, ",") {
					name, num, _ := strings.Cut(kv, "=")
					switch name {
					case "calls":
						cu.Calls, _ = strconv.ParseInt(num, 10, 64)
					case "usec":
						cu.Usec, _ = strconv.ParseInt(num, 10, 64)
					}
				}
				name := strings.TrimPrefix(k, "cmdstat_")
				sum := u.Commands[name]
				u.Commands[name] = RedisCommandUsage{Calls: sum.Calls + cu.Calls, Usec: sum.Usec + cu.Usec}
			}
		}
		return nil
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, one)
	} else {
		err = one(ctx, c.(*redis.Client))
	}
	if err != nil {
		t.Fatalf("reading Redis' INFO cpu and commandstats: %v", err)
	}
	return u
}

// Since is what was spent between before and u.
func (u RedisUsage) Since(before RedisUsage) RedisUsage {
	d := RedisUsage{CPU: u.CPU - before.CPU, Commands: map[string]RedisCommandUsage{}}
	for name, cu := range u.Commands {
		b := before.Commands[name]
		if cu.Calls != b.Calls {
			d.Commands[name] = RedisCommandUsage{Calls: cu.Calls - b.Calls, Usec: cu.Usec - b.Usec}
		}
	}
	return d
}

// PerOp describes u per one of n operations: the CPU, then each command's
// calls and microseconds, most time first ("evalsha 0.06× 31.2 µs").
func (u RedisUsage) PerOp(n int) string {
	if n <= 0 {
		n = 1
	}
	names := make([]string, 0, len(u.Commands))
	for name := range u.Commands {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return u.Commands[names[i]].Usec > u.Commands[names[j]].Usec })
	var b strings.Builder
	fmt.Fprintf(&b, "redis cpu %.1f µs", float64(u.CPU.Microseconds())/float64(n))
	for _, name := range names {
		cu := u.Commands[name]
		fmt.Fprintf(&b, "; %s %.2f× %.1f µs", name, float64(cu.Calls)/float64(n), float64(cu.Usec)/float64(n))
	}
	return b.String()
}
