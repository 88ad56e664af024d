package tests

import (
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// lgSeed is SP_TEST_SEED when set, to replay a failed run (its data and
// its kill moments), else a fresh seed; the test logs it either way.
func lgSeed(t testing.TB) uint64 {
	if v := os.Getenv("SP_TEST_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SP_TEST_SEED=%q: want an unsigned whole number", v)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// lgPartitions is the partition count of the load tests' topics: enough
// for two persisters to split, small enough for a laptop broker.
const lgPartitions = 6

// lgStack is one load test's topics, consumer group and database.
type lgStack struct {
	*testKafka
	prefix string
	group  string
	db     *dbtest.DB
	super  *pgx.Conn // superuser on the test database, for checks
}

// newLGStack creates a fresh migrated database and the 16 topics under a
// unique prefix with lgPartitions partitions; cleanup deletes the topics and
// the group (dbtest drops the database).
func newLGStack(t testing.TB, name string) *lgStack {
	t.Helper()
	unique := uniqueName(t, name)
	s := &lgStack{testKafka: newTestKafka(t), prefix: unique + ".", group: unique + "-persist", db: dbtest.New(t)}
	s.super = s.db.Connect(t, s.db.SuperuserURL)
	s.createAll(t, s.prefix, lgPartitions)
	s.own(nil, []string{s.group})
	return s
}

func (s *lgStack) topic() string { return s.prefix + "txn.ingested" }

// env is the environment of a persister or loadgen on this stack.
func (s *lgStack) env(extra map[string]string) map[string]string {
	env := map[string]string{
		"SP_KAFKA_BROKERS":      strings.Join(s.brokers, ","),
		"SP_KAFKA_TOPIC_PREFIX": s.prefix,
		"SP_PERSIST_GROUP":      s.group,
		"SP_DB_SYSTEM_URL":      s.db.SystemURL,
	}
	maps.Copy(env, extra)
	return env
}

// count is the number of stored transactions.
func (s *lgStack) count(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	if err := s.super.QueryRow(ctx, "SELECT count(*) FROM speculapro.transactions").Scan(&n); err != nil {
		t.Fatalf("counting transactions: %v", err)
	}
	return n
}

// lag is how many records of topic the group has not committed yet
// (a partition without a commit counts from its start).
func (s *lgStack) lag(t testing.TB, topic string) int64 {
	t.Helper()
	ends, committed := s.endOffsets(t, topic), s.committed(t, s.group)[topic]
	var lag int64
	for part, end := range ends {
		lag += max(end-max(committed[part], 0), 0)
	}
	return lag
}

// written is the number of records ever written to topic.
func (s *lgStack) written(t testing.TB, topic string) int64 {
	t.Helper()
	var n int64
	for _, end := range s.endOffsets(t, topic) {
		n += end
	}
	return n
}

// waitStored waits until count reaches want and the group has no lag on
// the transactions topic, failing after within.
func (s *lgStack) waitStored(t testing.TB, want int64, within time.Duration) {
	t.Helper()
	var n, lag int64
	if !poll(within, 250*time.Millisecond, func() bool {
		n, lag = s.count(t), s.lag(t, s.topic())
		return n >= want && lag == 0
	}) {
		t.Fatalf("after %s: %d of %d transactions stored, group lag %d", within, n, want, lag)
	}
}

// startLG runs `speculapro args…` with env, its output in a file.
func startLG(t testing.TB, name string, env map[string]string, args ...string) *binProcess {
	t.Helper()
	return newBinProcess(t).named(name).toFile(filepath.Join(t.TempDir(), name+".log")).start(t, env, args...)
}

// startPersister runs pipelines/persist.yaml on the stack with its HTTP
// server on its own loopback port (two persisters must not share one).
func startPersister(t testing.TB, s *lgStack, name string, extraEnv map[string]string, extraArgs ...string) *binProcess {
	t.Helper()
	p := newBinProcess(t).named(name).toFile(filepath.Join(t.TempDir(), name+".log"))
	args := append([]string{"run", "--set", "http.address=" + p.httpAddr}, extraArgs...)
	return p.start(t, s.env(extraEnv), append(args, "pipelines/persist.yaml")...)
}

// lgLoadgenArgs are the loadgen flags of a run over the stack; the start is
// fixed so the manifest recomputes the same transactions.
func lgLoadgenArgs(s *lgStack, cfg loadgen.Config, rate float64, manifest string) []string {
	return []string{"loadgen",
		"--count", strconv.Itoa(cfg.Count),
		"--accounts", strconv.Itoa(cfg.Accounts),
		"--workspaces", strconv.Itoa(cfg.Workspaces),
		"--counterparties", strconv.Itoa(cfg.Counterparties),
		"--seed", strconv.FormatUint(cfg.Seed, 10),
		"--known-accounts-ratio", strconv.FormatFloat(cfg.KnownAccountsRatio, 'f', -1, 64),
		"--linked-ratio", strconv.FormatFloat(cfg.LinkedRatio, 'f', -1, 64),
		"--start", cfg.Start.Format(time.RFC3339),
		"--spread", cfg.Spread.String(),
		"--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--db-url", s.db.SystemURL,
		"--dev-keys",
		"--manifest", manifest,
	}
}

func lgProtector(t testing.TB) *identity.Protector {
	t.Helper()
	p, err := identity.NewProtector(identity.DevKeys())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPersistCrashKillsAndRebalances is the persister's crash test: while
// loadgen sends transactions, the persister is killed with SIGKILL at five
// random moments and restarted, and once a second persister joins the group
// and leaves again. At the end every transaction sent is stored exactly
// once, every counterparty once per fingerprint (linked to its account where
// it pays a known account's IBAN), and no known customer or account is left
// a placeholder. SP_TEST_SCALE=full: 200,000 transactions over 20,000
// accounts; by default 20,000 over 2,000.
func TestPersistCrashKillsAndRebalances(t *testing.T) {
	t.Parallel()
	cfg := loadgen.Config{
		Seed: lgSeed(t), Count: 20000, Accounts: 2000, Workspaces: 4, Counterparties: 800,
		KnownAccountsRatio: 0.3, LinkedRatio: 0.05, Start: time.Now().UTC().Truncate(time.Second), Spread: 48 * time.Hour,
	}
	// Six events (five kills and one join/leave) at random moments of a
	// one-minute load, one in each sixth of it, at least restartGap apart:
	// a restarted persister first waits out the session timeout of the
	// member it replaces, so every event hits a persister that is writing
	// while transactions keep arriving.
	const loadFor, events, restartGap = 60 * time.Second, 6, 8 * time.Second
	settle := 4 * time.Minute
	if fullScale() {
		cfg.Count, cfg.Accounts, cfg.Counterparties = 200000, 20000, 5000
		settle = 10 * time.Minute
	}
	rate := float64(cfg.Count) / loadFor.Seconds()
	rnd := mrand.New(mrand.NewPCG(cfg.Seed, 1))
	t.Logf("seed %d (SP_TEST_SEED replays it): %d transactions over %d accounts at %.0f/s", cfg.Seed, cfg.Count, cfg.Accounts, rate)

	s := newLGStack(t, "crash")
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	// Three writers each: two persisters then hold as many writers as the
	// topic has partitions, as docs/persister.md advises when scaling.
	workers := map[string]string{"SP_PERSIST_WORKERS": "3"}
	// The group notices a killed member after the session timeout; the
	// broker's minimum (6 s) instead of the default 45 s keeps five kills
	// from costing four minutes of waiting, and changes nothing else.
	crashArgs := []string{"--set", "input.kafka_franz.session_timeout=6s"}

	persister := startPersister(t, s, "persister-0", workers, crashArgs...)
	load := startLG(t, "loadgen", s.env(nil), lgLoadgenArgs(s, cfg, rate, manifest)...)
	loadStart := time.Now()
	shareAt := 1 + rnd.IntN(events-2) // never first, never last
	slot := (loadFor - 6*time.Second) / events

	// progressed waits (bounded) until the count passes from, unless
	// everything is stored already.
	progressed := func(from int64) {
		var n int64
		if !poll(settle, 50*time.Millisecond, func() bool {
			if n = s.count(t); n > from || n >= int64(cfg.Count) {
				return true
			}
			if !persister.running() {
				t.Fatalf("%s exited by itself (code %d):\n%s", persister.name, persister.cmd.ProcessState.ExitCode(), persister.tail(3000))
			}
			return false
		}) {
			t.Fatalf("no transaction stored for %s; count %d, lag %d", settle, n, s.lag(t, s.topic()))
		}
	}
	restarts, storedAtStart, last := 0, int64(0), time.Duration(0)
	for k := range events {
		at := 3*time.Second + time.Duration(k)*slot + time.Duration(rnd.Int64N(int64(slot)))
		if k > 0 {
			at = max(at, last+restartGap)
		}
		time.Sleep(time.Until(loadStart.Add(at)))
		progressed(storedAtStart)
		if k != shareAt {
			before := s.count(t)
			persister.signal(t, syscall.SIGKILL, 30*time.Second)
			restarts++
			t.Logf("%4.1fs: SIGKILL %s at %d stored (%.0f%%), loadgen still sending: %v",
				time.Since(loadStart).Seconds(), persister.name, before, 100*float64(before)/float64(cfg.Count), load.running())
			persister = startPersister(t, s, fmt.Sprintf("persister-%d", restarts), workers, crashArgs...)
			storedAtStart, last = s.count(t), time.Since(loadStart)
			continue
		}
		// A second persister joins, takes partitions while the first keeps
		// writing, and leaves again: two rebalances under load.
		second := startPersister(t, s, "persister-second", workers, crashArgs...)
		joinedAt, from := time.Now(), s.count(t)
		if !poll(settle, 100*time.Millisecond, func() bool {
			if time.Since(joinedAt) >= 5*time.Second && s.count(t) >= min(from+int64(cfg.Count/50), int64(cfg.Count)) {
				return true
			}
			if !second.running() {
				t.Fatalf("with two persisters the count stayed at %d (second running: %v)", s.count(t), second.running())
			}
			return false
		}) {
			t.Fatalf("with two persisters the count stayed at %d (second running: %v)", s.count(t), second.running())
		}
		before := s.count(t)
		if code := second.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
			t.Fatalf("the second persister left with exit code %d:\n%s", code, second.tail(3000))
		}
		t.Logf("%4.1fs: second persister joined at %d stored and left at %d, loadgen still sending: %v",
			time.Since(loadStart).Seconds(), from, before, load.running())
		storedAtStart, last = before, time.Since(loadStart)
	}

	if code := load.waitExit(t, time.Duration(float64(cfg.Count)/rate*float64(time.Second))+3*time.Minute); code != 0 {
		t.Fatalf("loadgen exited with %d:\n%s", code, load.tail(3000))
	}
	m, err := loadgen.ReadManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete || m.Acked != int64(cfg.Count) {
		t.Fatalf("loadgen's manifest: %d of %d acknowledged", m.Acked, cfg.Count)
	}
	s.waitStored(t, int64(cfg.Count), settle)
	// The count must stay put once the lag is zero: a row still arriving now
	// would be one too many.
	settled := s.count(t)
	time.Sleep(2 * time.Second)
	if n := s.count(t); n != settled {
		t.Errorf("the count grew from %d to %d after the group's lag reached zero", settled, n)
	}

	mcfg, err := m.Config()
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadgen.New(mcfg, lgProtector(t))
	if err != nil {
		t.Fatal(err)
	}
	want := g.Expect(mcfg.Count)
	lgCheckStored(t, s, want)
	if n := s.written(t, s.prefix+"txn.ingested.dlq"); n != 0 {
		t.Errorf("%d records were dead-lettered; loadgen only sends valid ones", n)
	}
	if code := persister.signal(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("the last persister exited with %d on SIGTERM", code)
	}
	t.Logf("%d transactions, %d counterparties, %d accounts checked after %d kills and one join/leave",
		len(want.Transactions), len(want.Counterparties), len(want.Accounts), restarts)
}

// lgCheckStored compares the database with what loadgen sent: every
// transaction exactly once and nothing else, every counterparty once per
// fingerprint and linked where it pays a known account, every account and
// customer present and real exactly when loadgen wrote it as real.
func lgCheckStored(t *testing.T, s *lgStack, want loadgen.Expected) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := func(sql string, scan func(pgx.Rows) error) {
		rows, err := s.super.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	var total, distinct int64
	if err := s.super.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM speculapro.transactions").Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if total != distinct {
		t.Errorf("%d transaction rows but %d distinct ids: %d stored twice", total, distinct, total-distinct)
	}
	seen := make(map[event.UUID]bool, len(want.Transactions))
	var extra int
	q("SELECT id FROM speculapro.transactions", func(r pgx.Rows) error {
		var id event.UUID
		if err := r.Scan(&id); err != nil {
			return err
		}
		if _, ok := want.Transactions[id]; !ok {
			extra++
		}
		seen[id] = true
		return nil
	})
	var lost []string
	for id := range want.Transactions {
		if !seen[id] {
			lost = append(lost, id.String())
		}
	}
	if len(lost) > 0 || extra > 0 {
		t.Errorf("transactions: %d sent, %d rows; %d lost (e.g. %v), %d never sent", len(want.Transactions), total, len(lost), lost[:min(len(lost), 5)], extra)
	}

	type cpRow struct {
		n       int
		account *event.UUID
	}
	cps := map[loadgen.CounterpartyKey]*cpRow{}
	q("SELECT workspace_id, fingerprint, account_id FROM speculapro.counterparties", func(r pgx.Rows) error {
		var ws event.UUID
		var fp []byte
		var acc *event.UUID
		if err := r.Scan(&ws, &fp, &acc); err != nil {
			return err
		}
		k := loadgen.CounterpartyKey{Workspace: ws, Fingerprint: loadgen.FingerprintHex(fp)}
		if c, ok := cps[k]; ok {
			c.n++
		} else {
			cps[k] = &cpRow{n: 1, account: acc}
		}
		return nil
	})
	var cpMissing, cpExtra, cpTwice, badLink, linked int
	for k, acc := range want.Counterparties {
		c, ok := cps[k]
		switch {
		case !ok:
			cpMissing++
			continue
		case c.n > 1:
			cpTwice++
		}
		switch {
		case acc != (event.UUID{}) && (c.account == nil || *c.account != acc):
			badLink++
		case acc == (event.UUID{}) && c.account != nil:
			badLink++
		case acc != (event.UUID{}):
			linked++
		}
	}
	for k := range cps {
		if _, ok := want.Counterparties[k]; !ok {
			cpExtra++
		}
	}
	if cpMissing+cpExtra+cpTwice+badLink > 0 {
		t.Errorf("counterparties: %d expected, %d stored; %d missing, %d unexpected, %d stored twice, %d linked wrongly",
			len(want.Counterparties), len(cps), cpMissing, cpExtra, cpTwice, badLink)
	}
	if linked == 0 {
		t.Errorf("no counterparty was linked to a known account; loadgen sends some paying a known account's IBAN")
	}

	checkParties := func(table string, want map[event.UUID]bool) {
		got := map[event.UUID]bool{}
		q("SELECT id, placeholder FROM speculapro."+table, func(r pgx.Rows) error {
			var id event.UUID
			var placeholder bool
			if err := r.Scan(&id, &placeholder); err != nil {
				return err
			}
			got[id] = placeholder
			return nil
		})
		var missing, extra, realLeftPlaceholder, placeholderMadeReal int
		for id, real := range want {
			placeholder, ok := got[id]
			switch {
			case !ok:
				missing++
			case real && placeholder:
				realLeftPlaceholder++
			case !real && !placeholder:
				placeholderMadeReal++
			}
		}
		for id := range got {
			if _, ok := want[id]; !ok {
				extra++
			}
		}
		if missing+extra+realLeftPlaceholder+placeholderMadeReal > 0 {
			t.Errorf("%s: %d expected, %d stored; %d missing, %d unexpected, %d real ones left as placeholders, %d placeholders that claim to be real",
				table, len(want), len(got), missing, extra, realLeftPlaceholder, placeholderMadeReal)
		}
	}
	checkParties("accounts", want.Accounts)
	checkParties("customers", want.Customers)
}
