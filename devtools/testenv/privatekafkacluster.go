package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PrivateKafkaCluster is three Apache Kafka nodes of one test's own on
// loopback, each a combined broker and KRaft controller (a static
// three-voter quorum), started from the jars deploy/local/stack.sh installs.
// New topics get three replicas and min.insync.replicas=2 by default, as
// docs/kafka.md asks of a production cluster, and so do the internal
// topics. A test may kill, stop, pause and start any node; a majority of the
// nodes must run for the cluster to elect leaders.
type PrivateKafkaCluster struct {
	Nodes []*PrivateKafkaBroker // Nodes[i] has KRaft node id i+1
}

// Brokers is every node's bootstrap address, for SP_KAFKA_BROKERS.
func (c *PrivateKafkaCluster) Brokers() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.addr
	}
	return out
}

// Node is the node of a KRaft node id (as a partition's leader names it).
func (c *PrivateKafkaCluster) Node(id int32) *PrivateKafkaBroker {
	for _, n := range c.Nodes {
		if n.nodeID == id {
			return n
		}
	}
	return nil
}

// NodeID is the node's KRaft node id.
func (k *PrivateKafkaBroker) NodeID() int32 { return k.nodeID }

// StartPrivateKafkaCluster formats and starts three nodes on free loopback
// ports, each with its own data under t.TempDir(), and waits until every one
// answers a metadata request listing itself. They start together: a node
// answers only once a majority has elected a controller. Everything is
// killed when t ends. It skips (fails under SP_TEST_REQUIRE_SERVICES=1) as
// PrivateKafka does when java or the jars are missing.
func StartPrivateKafkaCluster(t testing.TB) *PrivateKafkaCluster {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		Unavailable(t, "private Kafka cluster NOT AVAILABLE (java is not installed; `bash deploy/local/stack.sh up` installs it).")
	}
	libs := kafkaLibs(t)
	if libs == "" {
		Unavailable(t, "private Kafka cluster NOT AVAILABLE (no Kafka jars in .cache/kafka/<version>/libs; `bash deploy/local/stack.sh up` fetches them).")
	}
	root := RepoRoot(t)
	c := &PrivateKafkaCluster{}
	var voters []string
	for i := range 3 {
		n := &PrivateKafkaBroker{
			t: t, addr: FreeAddr(t), ctrlAddr: FreeAddr(t), dir: t.TempDir(), libs: libs,
			confDir: filepath.Join(root, "deploy", "local", "kafka"), nodeID: int32(i + 1),
		}
		c.Nodes = append(c.Nodes, n)
		voters = append(voters, fmt.Sprintf("%d@%s", n.nodeID, n.ctrlAddr))
	}
	// Any fixed UUID in Kafka's base64 form will do: the cluster lives for
	// one test, in its own directories.
	const clusterID = "c3BlY3VsYXByb2NsdXN0ZQ"
	for _, n := range c.Nodes {
		n.clusterID = clusterID
		n.overrides = map[string]string{
			"node.id":                                          fmt.Sprint(n.nodeID),
			"controller.quorum.bootstrap.servers":              "", // a static quorum instead:
			"controller.quorum.voters":                         strings.Join(voters, ","),
			"default.replication.factor":                       "3",
			"min.insync.replicas":                              "2",
			"offsets.topic.replication.factor":                 "3",
			"transaction.state.log.replication.factor":         "3",
			"transaction.state.log.min.isr":                    "2",
			"share.coordinator.state.topic.replication.factor": "3",
			"share.coordinator.state.topic.min.isr":            "2",
			// Three JVMs share 2 cores with the test: one I/O thread each.
			"num.io.threads": "1",
		}
		n.prepare()
	}
	exited := make([]chan struct{}, len(c.Nodes))
	for i, n := range c.Nodes {
		exited[i] = n.launch()
	}
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		// waitReady fails the test with t.Fatalf, which must run on the
		// test's goroutine: the goroutines only wait, the checks follow.
		go func() { defer wg.Done(); n.waitAnswer(exited[i]) }()
	}
	wg.Wait()
	for i, n := range c.Nodes {
		n.waitReady(exited[i])
	}
	return c
}
