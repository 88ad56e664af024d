package embedkafka

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultAddr is where the embedded broker listens. It is not the local
// stack's 19092, so dev can run while a real broker is up beside it.
const DefaultAddr = "127.0.0.1:29092"

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
}

// Start starts a single-broker cluster on addr, persisting to dataDir, and
// reloading whatever an earlier run left there.
func Start(addr, dataDir string) (*Broker, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("embedded broker port %q: %w", portText, err)
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			// kfake would listen on every interface; dev is loopback only.
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
		kfake.DataDir(dataDir),
	)
	if err != nil {
		return nil, fmt.Errorf("starting embedded broker on %s with data in %s: %w", addr, dataDir, err)
	}
	return &Broker{cluster: c}, nil
}

// Addrs are the addresses clients should use as seed brokers.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Close stops the broker and flushes its data to disk.
func (b *Broker) Close() { b.cluster.Close() }
