package redisconn

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestOpen(t *testing.T) {
	const secret = "s3cr3tPW"
	tests := []struct {
		name    string
		url     string
		cluster bool
		addrs   []string
		db      int
		wantErr string
	}{
		{name: "single", url: "redis://127.0.0.1:6379/0", addrs: []string{"127.0.0.1:6379"}},
		{name: "single db and password", url: "redis://user:" + secret + "@h:6380/3", addrs: []string{"h:6380"}, db: 3},
		{name: "cluster flag", url: "redis://127.0.0.1:17001?cluster=true", cluster: true, addrs: []string{"127.0.0.1:17001"}},
		{name: "cluster false", url: "redis://127.0.0.1:6379/0?cluster=false", addrs: []string{"127.0.0.1:6379"}},
		{name: "seed list", url: "redis://127.0.0.1:17001, redis://127.0.0.1:17002,redis://127.0.0.1:17003", cluster: true,
			addrs: []string{"127.0.0.1:17001", "127.0.0.1:17002", "127.0.0.1:17003"}},
		{name: "seed list default port", url: "redis://a:1,redis://b", cluster: true, addrs: []string{"a:1", "b:6379"}},
		{name: "bad scheme", url: "http://user:" + secret + "@h:1", wantErr: "redis URL"},
		{name: "bad cluster value", url: "redis://user:" + secret + "@h:1?cluster=maybe", wantErr: "cluster must be"},
		{name: "empty item", url: "redis://a:1,,redis://b:2", wantErr: "item 2 of 3 is empty"},
		{name: "bad seed", url: "redis://a:1,user:" + secret + "@b", wantErr: "redis cluster URL 2"},
		{name: "control character", url: "redis://user:" + secret + "@h:1/\x7f", wantErr: "redis URL"},
		{name: "bad db", url: "redis://user:" + secret + "@h:1/x", wantErr: "redis URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(tc.url)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Open succeeded, want an error containing %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q does not contain %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error quotes the password: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			switch cl := c.(type) {
			case *redis.ClusterClient:
				if !tc.cluster {
					t.Fatal("got a cluster client, want a single one")
				}
				if got := strings.Join(cl.Options().Addrs, ","); got != strings.Join(tc.addrs, ",") {
					t.Errorf("addrs %s, want %v", got, tc.addrs)
				}
			case *redis.Client:
				if tc.cluster {
					t.Fatal("got a single client, want a cluster one")
				}
				if cl.Options().Addr != tc.addrs[0] || cl.Options().DB != tc.db {
					t.Errorf("addr %s db %d, want %s db %d", cl.Options().Addr, cl.Options().DB, tc.addrs[0], tc.db)
				}
			default:
				t.Fatalf("unexpected client %T", c)
			}
		})
	}
}

// TestNoBackoffTriesOnceMore: against a server that accepts and hangs up at
// once (a Redis going down), Open's client tries a command four times, the
// last three after backoff sleeps; OpenNoBackoff's tries twice. Attempts are
// counted as accepted connections: each attempt dials anew.
func TestNoBackoffTriesOnceMore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	url := "redis://" + ln.Addr().String() + "/0"
	for _, tc := range []struct {
		name     string
		open     func(string) (redis.UniversalClient, error)
		attempts int64
	}{
		{"Open", Open, 4},
		{"OpenNoBackoff", OpenNoBackoff, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.open(url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			before := accepted.Load()
			if err := c.Get(context.Background(), "k").Err(); err == nil {
				t.Fatal("GET from a server that hangs up succeeded")
			}
			if got := accepted.Load() - before; got != tc.attempts {
				t.Errorf("%d attempts, want %d", got, tc.attempts)
			}
		})
	}
}
