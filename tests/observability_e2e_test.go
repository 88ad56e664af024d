package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/speculapro/speculapro/devtools/loadgen"
	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/identity"
)

// The files under test, relative to the repository root.
const (
	obsAlertsFile     = "deploy/observability/alerts.yaml"
	obsDashboardsDir  = "deploy/observability/dashboards"
	obsScrapeInterval = "1s"
	// obsRateWindow replaces Grafana's $__rate_interval and $__interval: long
	// enough to hold the whole load, so a counter that moved once has a rate.
	obsRateWindow = "2m"
)

// TestObservabilityDashboardsAndAlertsOnLivePrometheus runs a real Prometheus
// (the Debian package's binary) scraping `speculapro dev` every second while
// the load generator sends a bounded load through dev's embedded broker into a
// workspace with the starter rules, plus one request through each HTTP API.
// The rare events dashboards and alerts watch are caused on purpose, as
// their counters appear only with the first one: batches that retry (a
// revoked permission), a dead letter, degraded decisions, a lost spool entry
// and a failed webhook delivery. Then every panel query of every dashboard must parse and return a series,
// and every alert expression must parse and name only metrics Prometheus has
// scraped: a dashboard or an alert cannot name a metric the binary does not
// export. Prometheus also loads alerts.yaml itself, and every rule must
// evaluate without error.
func TestObservabilityDashboardsAndAlertsOnLivePrometheus(t *testing.T) {
	t.Parallel()
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Unavailable(t, "prometheus (the Debian package, `apt-get install prometheus`; deploy/local/stack.sh up installs it) NOT FOUND.")
	}
	root := testenv.RepoRoot(t)
	dashboards := obsLoadDashboards(t, filepath.Join(root, obsDashboardsDir))
	alerts := obsLoadAlerts(t, filepath.Join(root, obsAlertsFile))

	// speculapro dev on its own database, data folder, broker, ports and
	// Redis keys.
	db := dbtest.NewBootstrapped(t)
	redisURL := testenv.RedisURL(t)
	keyPrefix := uniqueName(t, "observability") + ":"
	t.Cleanup(func() { deleteRedisKeys(t, redisURL, keyPrefix) })
	enc, fp := identity.DevKeys()
	ingestAddr, decisionAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := map[string]string{
		"SP_DB_SUPERUSER_URL":      testenv.PostgresSuperuserURL(t),
		"SP_DB_OWNER_URL":          db.OwnerURL,
		"SP_DB_URL":                db.AppURL,
		"SP_DB_SYSTEM_URL":         db.SystemURL,
		"SP_DATA_DIR":              t.TempDir(),
		"SP_INGEST_ADDR":           ingestAddr,
		"SP_DECISION_ADDR":         decisionAddr,
		"SP_CASE_ADDR":             testenv.FreeAddr(t),
		"SP_REDIS_URL":             redisURL,
		"SP_REDIS_KEY_PREFIX":      keyPrefix,
		"SP_DECISION_SPOOL_PREFIX": keyPrefix,
		"SP_ENCRYPTION_KEY":        enc,
		"SP_FINGERPRINT_KEY":       fp,
		// The worker delivers to the test's http:// receiver on loopback.
		"SP_WEBHOOK_ALLOW_INSECURE": "true",
		// So short that some decisions are answered degraded: the degraded
		// answers' series must exist too.
		"SP_DECISION_TIMEOUT": "1ms",
	}
	dev, kafkaAddr := devStart(t, env)

	prom := startPrometheus(t, promBin, dev.httpAddr, filepath.Join(root, obsAlertsFile))

	// The load generator's workspace (derived from its seed), created first
	// so the starter rules, a webhook endpoint and an API key are in place
	// before the load arrives.
	const seed, accounts, count, events = 7, 200, 3000, 600
	g, err := loadgen.New(loadgen.Config{
		Seed: seed, Count: count, Accounts: accounts, Workspaces: 1, Counterparties: 60,
		KnownAccountsRatio: loadgen.DefaultKnownAccountsRatio, LinkedRatio: loadgen.DefaultLinkedRatio,
		Start: time.Now().UTC().Truncate(time.Second), Spread: time.Hour, AccountEvents: events,
	}, lgProtector(t))
	if err != nil {
		t.Fatal(err)
	}
	ws := g.Workspaces()[0]
	conn := db.Connect(t, db.SystemURL)
	mustExec(t, conn, `INSERT INTO speculapro.workspaces (id, name) VALUES ($1, 'observability e2e')`, ws)
	ruleFiles, err := filepath.Glob(filepath.Join(root, "config/rules/*.yaml"))
	if err != nil || len(ruleFiles) == 0 {
		t.Fatalf("no starter rules in config/rules: %v", err)
	}
	if out, errOut, code := runBin(t, env, append([]string{"rules", "apply", "--workspace", ws.String()}, ruleFiles...)...); code != 0 {
		t.Fatalf("rules apply: exit %d\n%s\n%s", code, out, errOut)
	}
	// The receiver refuses its first delivery, so the worker's outcomes
	// include a failed attempt.
	var received atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	if out, errOut, code := runBin(t, env, "webhook", "add", "--workspace", ws.String(), "--url", receiver.URL+"/hook"); code != 0 {
		t.Fatalf("webhook add: exit %d\n%s\n%s", code, out, errOut)
	}
	key := ingestCLI(t, db.AppURL, "apikey", "create", "--workspace", ws.String(), "--name", "observability")["api_key"]

	// The persister and the stream may not insert until they have retried a
	// batch (a permission is an error they wait out), so the retry series
	// exist; then they store everything.
	super := db.Connect(t, db.SuperuserURL)
	mustExec(t, super, `REVOKE INSERT ON speculapro.transactions, speculapro.rule_hits FROM speculapro_system`)

	// The bounded load: account events, then transactions, at a fixed rate.
	lgEnv := map[string]string{"SP_KAFKA_BROKERS": kafkaAddr}
	load := newBinProcess(t).named("loadgen").start(t, lgEnv, "loadgen",
		"--count", fmt.Sprint(count), "--account-events", fmt.Sprint(events), "--rate", "300",
		"--accounts", fmt.Sprint(accounts), "--workspaces", "1", "--counterparties", "60",
		"--seed", fmt.Sprint(seed), "--spread", "1h", "--db-url", db.SystemURL, "--dev-keys")
	for _, m := range []string{"speculapro_persist_retries_total", "speculapro_stream_retries_total"} {
		waitForMetric(t, dev, m, 1)
	}
	mustExec(t, super, `GRANT INSERT ON speculapro.transactions, speculapro.rule_hits TO speculapro_system`)

	// One request through each API and one record no decoder reads (the
	// persister parks it on the dead-letter topic, the stream skips it), so
	// the series of those paths exist too.
	ingestWaitReady(t, dev, "http://"+ingestAddr)
	client := &http.Client{Timeout: 10 * time.Second}
	if code, a := ingestPost(t, client, "http://"+ingestAddr, key, "/v1/transactions", ingestBody(t, ingestTxn(1, time.Now().UTC()))); code != http.StatusOK {
		t.Fatalf("ingest API answered %d: %+v", code, a)
	}
	n := 0
	waitUntil(t, waitBound, "a degraded decision", func() error {
		n++
		body, _ := json.Marshal(decisionTxn("obs", n, time.Now().UTC()))
		code, a, err := postDecision("http://"+decisionAddr, key, body)
		switch {
		case err != nil:
			return err
		case code != http.StatusOK:
			return fmt.Errorf("decision API answered %d: %+v", code, a)
		case !a.Degraded:
			return fmt.Errorf("decision %d answered in time", n)
		}
		return nil
	})
	produceRaw(t, kafkaAddr, "sp.txn.ingested", []byte("not an event"))
	// An entry of the decision spool no one can read is counted lost when
	// the spool is replayed.
	rdb, err := redisOpen(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.RPush(context.Background(), keyPrefix+"spool:{decisions}", "not a spool entry").Err(); err != nil {
		t.Fatalf("adding to the spool: %v", err)
	}

	if code := load.waitExit(t, runBound); code != 0 {
		t.Fatalf("loadgen exited %d:\n%s", code, load.tail(3000))
	}
	// Every event the test caused has been counted, and the load stored.
	for _, m := range []string{"speculapro_stream_rule_hits_total", "speculapro_worker_deliveries_total",
		"speculapro_persist_dead_letters_total", "speculapro_decision_events_lost_total"} {
		waitForMetric(t, dev, m, 1)
	}
	waitUntil(t, waitBound, "the load to be stored", func() error {
		s, err := dev.scrape()
		if err != nil {
			return err
		}
		if got := metricSum(s, "speculapro_persist_rows_stored_total", `table="transactions"`); got < count {
			return fmt.Errorf("%v of %d transactions stored", got, count)
		}
		return nil
	})
	// A few more scrapes, so the last values are in Prometheus too.
	lastScrape := time.Now()
	waitUntil(t, 30*time.Second, "Prometheus to scrape the end of the load", func() error {
		return prom.scrapedSince(lastScrape.Add(2 * time.Second))
	})

	names := prom.metricNames(t)
	for _, d := range dashboards {
		vars := prom.resolveVars(t, d, names)
		for _, p := range d.panels {
			for _, q := range p.queries {
				expr := obsSubstitute(q, vars)
				n, err := prom.query(expr)
				switch {
				case err != nil:
					t.Errorf("%s, panel %q: %s\n  query %s", d.file, p.title, err, expr)
				case n == 0:
					t.Errorf("%s, panel %q: no series\n  query %s", d.file, p.title, expr)
				}
				if missing := obsMissing(expr, names); len(missing) > 0 {
					t.Errorf("%s, panel %q names metrics the binary does not export: %v", d.file, p.title, missing)
				}
			}
		}
	}
	for _, a := range alerts {
		if _, err := prom.query(a.expr); err != nil {
			t.Errorf("%s, alert %s: %s\n  expr %s", obsAlertsFile, a.name, err, a.expr)
		}
		if missing := obsMissing(a.expr, names); len(missing) > 0 {
			t.Errorf("%s, alert %s names metrics the binary does not export: %v", obsAlertsFile, a.name, missing)
		}
	}
	prom.rulesHealthy(t, len(alerts))
	// Ctrl-C: dev must stop cleanly (its log holds the errors the test
	// caused on purpose).
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("dev exited with code %d after Ctrl-C", code)
	}
}

// produceRaw writes one record with value to topic on broker.
func produceRaw(t *testing.T, broker, topic string, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("obs"), Value: value}).FirstErr(); err != nil {
		t.Fatalf("producing to %s: %v", topic, err)
	}
}

// obsDashboard is what the test reads of a Grafana dashboard.
type obsDashboard struct {
	file      string
	varQuery  map[string]string // query variable → its label_values(…) query
	constVars map[string]string // any other variable → its current value
	panels    []obsPanel
}

type obsPanel struct {
	title   string
	queries []string
}

// obsLoadDashboards reads every dashboard JSON in dir: its panels (rows
// included, nested or not) and its template variables: the queries of
// query variables, the current value of any other.
func obsLoadDashboards(t *testing.T, dir string) []obsDashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dir, err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var out []obsDashboard
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Title      string  `json:"title"`
			UID        string  `json:"uid"`
			Panels     []panel `json:"panels"`
			Templating struct {
				List []struct {
					Name       string          `json:"name"`
					Type       string          `json:"type"`
					Definition string          `json:"definition"`
					Query      json.RawMessage `json:"query"`
					Current    struct {
						Value any `json:"value"`
					} `json:"current"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		od := obsDashboard{file: filepath.Join(obsDashboardsDir, filepath.Base(f)), varQuery: map[string]string{}, constVars: map[string]string{}}
		if d.Title == "" || d.UID == "" {
			t.Errorf("%s: a dashboard needs a title and a uid", od.file)
		}
		hasDatasource := false
		for _, v := range d.Templating.List {
			switch {
			case v.Type == "datasource":
				hasDatasource = v.Name == "datasource"
			case v.Type == "query":
				// The query as a string, or Grafana's newer object form,
				// whose definition holds the same text.
				q := v.Definition
				if err := json.Unmarshal(v.Query, &q); err != nil || q == "" {
					q = v.Definition
				}
				od.varQuery[v.Name] = q
			default:
				if s, ok := v.Current.Value.(string); ok && s != "" {
					od.constVars[v.Name] = s
				} else {
					t.Errorf("%s: variable %s has no current value to test with", od.file, v.Name)
				}
			}
		}
		if !hasDatasource {
			t.Errorf("%s: no Prometheus datasource variable named datasource", od.file)
		}
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				if p.Type == "row" || p.Type == "text" {
					continue
				}
				op := obsPanel{title: p.Title}
				for _, tg := range p.Targets {
					if tg.Expr != "" {
						op.queries = append(op.queries, tg.Expr)
					}
				}
				if len(op.queries) == 0 {
					t.Errorf("%s: panel %q has no query", od.file, p.Title)
				}
				od.panels = append(od.panels, op)
			}
		}
		walk(d.Panels)
		if len(od.panels) == 0 {
			t.Errorf("%s: no panels", od.file)
		}
		out = append(out, od)
	}
	return out
}

var obsVarRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// obsSubstitute replaces Grafana's variables in a query as Grafana would
// before sending it.
func obsSubstitute(q string, vars map[string]string) string {
	return obsVarRE.ReplaceAllStringFunc(q, func(m string) string {
		sub := obsVarRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return obsRateWindow
		}
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

// obsAlert is one alerting rule of alerts.yaml.
type obsAlert struct{ name, expr string }

// obsLoadAlerts reads the alerting rules of path once `promtool check
// rules` has accepted the file.
func obsLoadAlerts(t *testing.T, path string) []obsAlert {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool (the Debian prometheus package) NOT FOUND.")
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", path, err, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []obsAlert
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, obsAlert{name: r.Alert, expr: r.Expr})
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no alerting rules", path)
	}
	return out
}

// obsMissing lists the metric names in expr that Prometheus has never
// scraped (an expression's functions, keywords and label names are not
// metric names: only words followed by a selector or standing alone are
// checked against the names the binary exports).
func obsMissing(expr string, names map[string]bool) []string {
	var missing []string
	for _, n := range obsMetricNames(expr) {
		if !names[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

// PromQL words that are not metric names where a metric name could stand.
var obsKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
	"and", "or", "unless", "offset", "inf", "nan", "atan2"}

var (
	obsStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	obsMatchersRE = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	obsGroupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	obsIdentRE    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// obsMetricNames are the metric names an expression selects: its
// identifiers once strings, label matchers, ranges and grouping lists are
// removed, less function calls, keywords and numbers.
func obsMetricNames(expr string) []string {
	e := obsStringRE.ReplaceAllString(expr, `""`)
	e = obsMatchersRE.ReplaceAllString(e, " ")
	e = obsGroupingRE.ReplaceAllString(e, " ")
	var names []string
	for _, loc := range obsIdentRE.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if strings.HasSuffix(id, "(") {
			continue // a function or an aggregation
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // a number's exponent or a duration's unit
		}
		if slices.Contains(obsKeywords, strings.ToLower(id)) {
			continue
		}
		names = append(names, id)
	}
	return names
}

// obsPrometheus is a Prometheus of the test's own.
type obsPrometheus struct {
	base string
	cmd  *binProcess
}

// startPrometheus runs prometheus with its own data folder on a free
// loopback port, scraping target's /metrics every second and evaluating
// rules every second.
func startPrometheus(t *testing.T, bin, target, rules string) *obsPrometheus {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
rule_files: [%[2]q]
scrape_configs:
  - job_name: speculapro-dev
    static_configs:
      - targets: [%[3]q]
`, obsScrapeInterval, rules, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	p := newBinProcess(t).named("prometheus").using(bin).toFile(filepath.Join(dir, "prometheus.log"))
	p.start(t, nil, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--storage.tsdb.retention.time=1h")
	prom := &obsPrometheus{base: "http://" + addr, cmd: p}
	waitUntil(t, waitBound, "Prometheus to scrape dev", func() error {
		if !p.running() {
			t.Fatalf("prometheus exited:\n%s", p.tail(3000))
		}
		return prom.scrapedSince(time.Time{})
	})
	return prom
}

var obsLabelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// resolveVars gives each variable of d the value Grafana sends when "All"
// is chosen: a query variable's values (label_values(selector, label), which
// must name an exported metric and find values) as an alternation of
// escaped regular expressions.
func (p *obsPrometheus) resolveVars(t *testing.T, d obsDashboard, names map[string]bool) map[string]string {
	t.Helper()
	vars := maps.Clone(d.constVars)
	for name, q := range d.varQuery {
		m := obsLabelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", d.file, name, q)
			continue
		}
		if missing := obsMissing(m[1], names); len(missing) > 0 {
			t.Errorf("%s: variable %s names metrics the binary does not export: %v", d.file, name, missing)
		}
		var values []string
		if err := p.api("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {m[1]}}, &values); err != nil || len(values) == 0 {
			t.Errorf("%s: variable %s: %s finds no values (%v)", d.file, name, q, err)
			continue
		}
		for i, v := range values {
			values[i] = strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
		}
		vars[name] = "(" + strings.Join(values, "|") + ")"
	}
	return vars
}

// api GETs path with params from Prometheus' HTTP API and decodes its data.
func (p *obsPrometheus) api(path string, params url.Values, data any) error {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: answer %d: %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s (%s)", r.Error, r.ErrorType)
	}
	return json.Unmarshal(r.Data, data)
}

// query runs an instant query and returns how many series (or 1 for a
// scalar) it answered.
func (p *obsPrometheus) query(expr string) (int, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

// scrapedSince is nil once the target's last successful scrape is after
// since.
func (p *obsPrometheus) scrapedSince(since time.Time) error {
	var data struct {
		ActiveTargets []struct {
			Health     string    `json:"health"`
			LastScrape time.Time `json:"lastScrape"`
			LastError  string    `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.api("/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return err
	}
	if len(data.ActiveTargets) != 1 {
		return fmt.Errorf("%d active targets, want 1", len(data.ActiveTargets))
	}
	tg := data.ActiveTargets[0]
	if tg.Health != "up" || !tg.LastScrape.After(since) {
		return fmt.Errorf("target %s, last scrape %s: %s", tg.Health, tg.LastScrape, tg.LastError)
	}
	return nil
}

// metricNames are the names of every metric Prometheus has stored.
func (p *obsPrometheus) metricNames(t *testing.T) map[string]bool {
	t.Helper()
	var names []string
	if err := p.api("/api/v1/label/__name__/values", url.Values{}, &names); err != nil {
		t.Fatalf("listing metric names: %v", err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// rulesHealthy fails the test unless Prometheus loaded want alerting rules
// and has evaluated each of them without an error.
func (p *obsPrometheus) rulesHealthy(t *testing.T, want int) {
	t.Helper()
	waitUntil(t, 30*time.Second, "Prometheus to evaluate every alerting rule", func() error {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Type      string `json:"type"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.api("/api/v1/rules", url.Values{"type": {"alert"}}, &data); err != nil {
			return err
		}
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health == "err" {
					t.Fatalf("alert %s does not evaluate: %s", r.Name, r.LastError)
				}
				if r.Health != "ok" {
					return fmt.Errorf("alert %s: health %q", r.Name, r.Health)
				}
			}
		}
		if n != want {
			return fmt.Errorf("Prometheus loaded %d alerting rules, want %d", n, want)
		}
		return nil
	})
}
