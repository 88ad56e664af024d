package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedisClusterNodeTimeout is the private cluster's
// cluster-node-timeout: a killed master's replica is promoted within about
// twice this.
const PrivateRedisClusterNodeTimeout = 2 * time.Second

// PrivateRedisCluster is a Redis Cluster of one test's own: masters with
// one replica each, redis-server processes on free loopback ports, each
// with its own directory, which the test may kill and start again (the
// stack's cluster must never be touched). Nothing is persisted but each
// node's nodes.conf, so a restarted node rejoins the cluster (as a replica
// of whoever took over its slots) and copies its data from its master.
type PrivateRedisCluster struct {
	t     testing.TB
	nodes []*clusterNode
}

type clusterNode struct {
	addr, dir string
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
}

// PrivateRedisClusterWithReplicas starts masters masters and as many
// replicas (redis-cli --cluster create --cluster-replicas 1) and waits until
// the cluster state is ok and every replica is in sync. Everything is
// killed when t ends.
func PrivateRedisClusterWithReplicas(t testing.TB, masters int) *PrivateRedisCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			Unavailable(t, "private Redis Cluster NOT AVAILABLE ("+bin+" is not installed; `bash deploy/local/stack.sh up` installs it).")
		}
	}
	c := &PrivateRedisCluster{t: t}
	root := t.TempDir()
	for i := 0; i < 2*masters; i++ {
		n := &clusterNode{addr: FreeAddr(t), dir: filepath.Join(root, strconv.Itoa(i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		for i, n := range c.nodes {
			n.signal(syscall.SIGCONT)
			n.kill()
			if t.Failed() {
				if b, err := os.ReadFile(filepath.Join(n.dir, "redis.log")); err == nil && len(b) > 0 {
					if len(b) > 2000 {
						b = b[len(b)-2000:]
					}
					t.Logf("private Redis Cluster node %d (%s) log:\n%s", i, n.addr, b)
				}
			}
		}
	})
	for i := range c.nodes {
		c.Start(i)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(60 * time.Second)
	return c
}

// URL is the seed URLs of every node, in SP_REDIS_URL's comma-separated form.
func (c *PrivateRedisCluster) URL() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, "redis://"+n.addr)
	}
	return strings.Join(us, ",")
}

// Addrs are the nodes' host:port, by index.
func (c *PrivateRedisCluster) Addrs() []string {
	var as []string
	for _, n := range c.nodes {
		as = append(as, n.addr)
	}
	return as
}

// Start starts node i (again, on its port and with its nodes.conf) and
// waits until it answers PING.
func (c *PrivateRedisCluster) Start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	n.mu.Lock()
	if n.cmd != nil {
		n.mu.Unlock()
		c.t.Fatalf("private Redis Cluster: node %d started while running", i)
	}
	host, port, _ := strings.Cut(n.addr, ":")
	cmd := exec.Command("redis-server", "--bind", host, "--port", port, "--dir", n.dir,
		"--logfile", filepath.Join(n.dir, "redis.log"), "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(n.dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.FormatInt(PrivateRedisClusterNodeTimeout.Milliseconds(), 10),
		// Fail over whatever the replica's last contact: the test kills
		// masters under load, and a replica never lags long on loopback.
		"--cluster-replica-validity-factor", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		c.t.Fatalf("private Redis Cluster: starting node %d: %v", i, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	probe := &PrivateRedisServer{addr: n.addr}
	deadline := time.Now().Add(30 * time.Second)
	for probe.ping() != nil {
		if time.Now().After(deadline) {
			c.t.Fatalf("private Redis Cluster node %d at %s did not answer PING within 30s", i, n.addr)
		}
		select {
		case <-exited:
			c.t.Fatalf("private Redis Cluster node %d exited during startup (log in %s)", i, n.dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill ends node i with SIGKILL.
func (c *PrivateRedisCluster) Kill(i int) { c.nodes[i].kill() }

func (n *clusterNode) kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (n *clusterNode) signal(s syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(s)
	}
}

// ClusterRole is one node's place in the cluster as a live node sees it.
type ClusterRole struct {
	Addr     string
	Master   bool
	Failed   bool   // flagged fail (or pfail) by the node asked
	MasterID string // a replica's master
	ID       string
	Slots    bool // a master serving slots
}

// Roles asks the first running node for CLUSTER NODES.
func (c *PrivateRedisCluster) Roles() ([]ClusterRole, error) {
	var lastErr error
	for _, n := range c.nodes {
		n.mu.Lock()
		running := n.cmd != nil
		n.mu.Unlock()
		if !running {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		s, err := cl.ClusterNodes(context.Background()).Result()
		_ = cl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		var rs []ClusterRole
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			r := ClusterRole{Addr: addr, ID: f[0], Master: strings.Contains(f[2], "master"),
				Failed: strings.Contains(f[2], "fail"), Slots: len(f) > 8}
			if f[3] != "-" {
				r.MasterID = f[3]
			}
			rs = append(rs, r)
		}
		return rs, nil
	}
	return nil, fmt.Errorf("no running node answered CLUSTER NODES: %v", lastErr)
}

// Index is the index of the node at addr, or -1.
func (c *PrivateRedisCluster) Index(addr string) int {
	for i, n := range c.nodes {
		if n.addr == addr {
			return i
		}
	}
	return -1
}

// Masters are the indexes of the running masters serving slots.
func (c *PrivateRedisCluster) Masters() []int {
	c.t.Helper()
	rs, err := c.Roles()
	if err != nil {
		c.t.Fatal(err)
	}
	var ms []int
	for _, r := range rs {
		if r.Master && r.Slots && !r.Failed {
			ms = append(ms, c.Index(r.Addr))
		}
	}
	return ms
}

// healthy: every node answers cluster_state:ok, half the nodes are masters
// with slots and every replica's link to its master is up.
func (c *PrivateRedisCluster) healthy() error {
	rs, err := c.Roles()
	if err != nil {
		return err
	}
	masters := 0
	for _, r := range rs {
		if r.Failed {
			return fmt.Errorf("node %s flagged failed", r.Addr)
		}
		if r.Master && r.Slots {
			masters++
		}
	}
	if masters*2 != len(c.nodes) {
		return fmt.Errorf("%d masters with slots of %d nodes", masters, len(c.nodes))
	}
	for _, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		info, err := cl.ClusterInfo(context.Background()).Result()
		var repl string
		if err == nil {
			repl, err = cl.Info(context.Background(), "replication").Result()
		}
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("node %s: cluster state not ok", n.addr)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("node %s: replica link not up", n.addr)
		}
		if strings.Contains(repl, "role:master") && !strings.Contains(repl, "connected_slaves:1") {
			return fmt.Errorf("node %s: master without its replica", n.addr)
		}
	}
	return nil
}

// WaitHealthy waits (bounded) until every node is up, every master has its
// replica in sync and the cluster state is ok, and returns how long it took.
func (c *PrivateRedisCluster) WaitHealthy(within time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < within {
		if err = c.healthy(); err == nil {
			return time.Since(start)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("private Redis Cluster not healthy within %s: %v", within, err)
	return 0
}

// ReplicaOf is the index of master i's replica.
func (c *PrivateRedisCluster) ReplicaOf(i int) int {
	c.t.Helper()
	rs, err := c.Roles()
	if err != nil {
		c.t.Fatal(err)
	}
	var id string
	for _, r := range rs {
		if r.Addr == c.nodes[i].addr {
			id = r.ID
		}
	}
	for _, r := range rs {
		if id != "" && r.MasterID == id {
			return c.Index(r.Addr)
		}
	}
	c.t.Fatalf("private Redis Cluster: node %d has no replica", i)
	return -1
}

// WaitPromoted waits (bounded) until replica r serves slots as a master and
// answers cluster_state:ok, and returns how long it took.
func (c *PrivateRedisCluster) WaitPromoted(r int, within time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < within {
		cl := redis.NewClient(&redis.Options{Addr: c.nodes[r].addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		var repl, info string
		repl, err = cl.Info(context.Background(), "replication").Result()
		if err == nil {
			info, err = cl.ClusterInfo(context.Background()).Result()
		}
		_ = cl.Close()
		if err == nil {
			if strings.Contains(repl, "role:master") && strings.Contains(info, "cluster_state:ok") {
				return time.Since(start)
			}
			err = fmt.Errorf("node %s not yet a master of a healthy cluster", c.nodes[r].addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("replica %d not promoted within %s: %v", r, within, err)
	return 0
}
