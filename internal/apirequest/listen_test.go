package apirequest

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// TestListenHoldsAtMostMaxConnections: with MaxConns open connections a new
// one is not served (it waits in the kernel's accept queue) until one of
// them closes, so an overload's connections cost the process nothing.
func TestListenHoldsAtMostMaxConnections(t *testing.T) {
	t.Parallel()
	addr := testenv.FreeAddr(t)
	f := &Front{Component: "test_api", Log: service.MockResources().Logger(), MaxConns: 2}
	if err := f.Listen(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.ShutdownServer(context.Background(), f.Server) }()
	ask := func(c net.Conn, within time.Duration) (string, error) {
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Kept alive after its answer: it holds its place.
		if line, err := ask(c, 5*time.Second); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("a connection within the limit: %q, %v", line, err)
		}
		held = append(held, c)
	}
	third, err := net.Dial("tcp", addr) // the kernel accepts it; the server does not take it yet
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if line, err := ask(third, 300*time.Millisecond); err == nil {
		t.Fatalf("a third connection beyond a limit of 2 was served: %q", line)
	}
	_ = held[0].Close()
	_ = third.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(third).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("the waiting connection once one closed: %q, %v", line, err)
	}
}
