package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PrivateRedisServer is a redis-server of one test's own, on a free loopback
// port with its own directory, which the test may stop, kill, pause and start
// again (the shared Redis must never be touched). Like the shared one it
// keeps nothing on disk: after Stop or Kill, Start begins empty, as a Redis
// without persistence would.
type PrivateRedisServer struct {
	t    testing.TB
	addr string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Addr is host:port.
func (r *PrivateRedisServer) Addr() string { return r.addr }

// URL is the redis:// URL, for SP_REDIS_URL.
func (r *PrivateRedisServer) URL() string { return "redis://" + r.addr }

// PrivateRedis starts a throwaway redis-server (no persistence) on a free
// loopback port and waits until it answers PING. It is killed when t ends.
// It skips loudly (fails under SP_TEST_REQUIRE_SERVICES=1) when redis-server
// is not installed.
func PrivateRedis(t testing.TB) *PrivateRedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "private Redis NOT AVAILABLE (redis-server is not installed; `bash deploy/local/stack.sh up` installs it).")
	}
	r := &PrivateRedisServer{t: t, addr: FreeAddr(t), dir: t.TempDir()}
	t.Cleanup(func() {
		r.signal(syscall.SIGCONT)
		r.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(r.dir, "redis.log")); err == nil && len(b) > 0 {
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("private Redis log:\n%s", b)
			}
		}
	})
	r.Start()
	return r
}

// Start starts the server (again, on the same port) and waits for PING.
func (r *PrivateRedisServer) Start() {
	r.t.Helper()
	r.mu.Lock()
	if r.cmd != nil {
		r.mu.Unlock()
		r.t.Fatal("private Redis: Start while it is running")
	}
	host, port, _ := strings.Cut(r.addr, ":")
	cmd := exec.Command("redis-server", "--bind", host, "--port", port, "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"), "--save", "", "--appendonly", "no",
		"--daemonize", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		r.t.Fatalf("private Redis: starting redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := r.ping()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("private Redis at %s did not answer PING within 30s: %v", r.addr, err)
		}
		select {
		case <-exited:
			r.mu.Lock()
			r.cmd = nil
			r.mu.Unlock()
			r.t.Fatalf("private Redis exited during startup (log in %s)", r.dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ping sends an inline PING and wants +PONG.
func (r *PrivateRedisServer) ping() error {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("PING answered %q", buf[:n])
	}
	return nil
}

// Stop stops the server cleanly (SIGTERM) and waits for it to exit.
func (r *PrivateRedisServer) Stop() {
	r.signal(syscall.SIGCONT)
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	r.mu.Lock()
	r.cmd = nil
	r.mu.Unlock()
}

// Kill ends the server with SIGKILL.
func (r *PrivateRedisServer) Kill() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Pause freezes the server (SIGSTOP): connections stay open, nothing answers.
func (r *PrivateRedisServer) Pause() { r.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (r *PrivateRedisServer) Resume() { r.signal(syscall.SIGCONT) }

func (r *PrivateRedisServer) signal(s syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(s)
	}
}
