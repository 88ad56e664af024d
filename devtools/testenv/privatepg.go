package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// PrivatePG is a PostgreSQL server of one test's own, which the test may stop
// and start (the shared one must never be stopped).
type PrivatePG struct {
	// SuperuserURL reaches the postgres database as the superuser postgres.
	SuperuserURL string
	// Stop shuts the server down (fast mode: connections are cut).
	Stop func()
	// Start starts it again on the same port and data.
	Start func()
}

// PrivatePostgres initialises and starts a throwaway PostgreSQL cluster with
// the local installation's initdb and pg_ctl, in a temporary directory, on a
// free loopback port, running as the postgres OS user (we run as root). Local
// connections are trusted. It is stopped and removed when t ends. It skips
// loudly (fails under SP_TEST_REQUIRE_SERVICES=1) when the binaries or the
// postgres user are missing.
func PrivatePostgres(t testing.TB) *PrivatePG {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	sort.Strings(bins)
	pgUser, uerr := user.Lookup("postgres")
	if len(bins) == 0 || uerr != nil || os.Geteuid() != 0 {
		Unavailable(t, "private PostgreSQL NOT AVAILABLE (needs /usr/lib/postgresql/*/bin, the postgres OS user and root).")
	}
	binDir := filepath.Dir(bins[len(bins)-1])
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)

	// Not t.TempDir(): its parents are root-only, and the server runs as
	// postgres.
	dir, err := os.MkdirTemp("", "sp-privatepg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	logFile := filepath.Join(dir, "server.log")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	asPostgres := func(name string, args ...string) error {
		cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(binDir, name)}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
		}
		return nil
	}
	if err := asPostgres("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50", port, dir)
	start := func() {
		t.Helper()
		if err := asPostgres("pg_ctl", "-D", data, "-o", opts, "-l", logFile, "-w", "-t", "60", "start"); err != nil {
			t.Fatal(err)
		}
	}
	stop := func() {
		t.Helper()
		if err := asPostgres("pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
			t.Fatal(err)
		}
	}
	start()
	t.Cleanup(func() {
		_ = asPostgres("pg_ctl", "-D", data, "-m", "immediate", "-w", "-t", "30", "stop")
		if t.Failed() {
			if b, err := os.ReadFile(logFile); err == nil {
				t.Logf("private PostgreSQL log:\n%s", b)
			}
		}
		os.RemoveAll(dir)
	})
	return &PrivatePG{
		SuperuserURL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		Stop:         stop,
		Start:        start,
	}
}
