// Command kfakebroker runs a franz-go kfake Kafka-protocol broker as its own
// process until SIGTERM or SIGINT, so an end-to-end test can stop "Kafka"
// and start it again (on the same port, with the same data directory)
// without touching the real broker other engineers share.
//
//	kfakebroker -addr 127.0.0.1:39092 -data /tmp/x -partitions 3 -topics a,b
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
	data := flag.String("data", "", "data directory kept across restarts")
	partitions := flag.Int("partitions", 3, "partitions of each seeded topic")
	topics := flag.String("topics", "", "comma-separated topics to create at start")
	flag.Parse()

	host, portText, err := net.SplitHostPort(*addr)
	if err != nil {
		fail(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		fail(err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
		// Acknowledged means on disk, as acks=all means on a real broker.
		kfake.SyncWrites(),
	}
	if *data != "" {
		opts = append(opts, kfake.DataDir(*data))
	}
	if *topics != "" {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), strings.Split(*topics, ",")...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fail(err)
	}
	fmt.Printf("listening %s\n", strings.Join(c.ListenAddrs(), ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kfakebroker:", err)
	os.Exit(1)
}
