package all_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/event"
)

// prepareCaseAPI: the case API on the app role through the test's proxy,
// with a key of the cases scope and one case; message n is comment n on
// it, which the input hands on as its case event. The API serves while
// PostgreSQL is lost (503, readiness says why) and its pool connects again
// by itself, so feed retries a comment until it is made.
func prepareCaseAPI(t *testing.T) rowSetup {
	p := newProxiedDB(t)
	u, err := url.Parse(p.db.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.proxy.Addr()
	key, err := apikey.New()
	if err != nil {
		t.Fatal(err)
	}
	var id event.UUID
	if _, err := p.conn.Exec(t.Context(), `INSERT INTO speculapro.api_keys (workspace_id, name, key_prefix, key_hash, scopes)
VALUES ($1, 'conformance', $2, $3, '{cases}')`, p.ws, key.Display, key.Hash); err != nil {
		t.Fatal(err)
	}
	if err := p.conn.QueryRow(t.Context(), `INSERT INTO speculapro.cases (workspace_id, title, group_key)
VALUES ($1, 'conformance', 'alert:conformance') RETURNING id`, p.ws).Scan(&id); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	version := 1
	comment := func(n int) error {
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/v1/cases/%s/comments", addr, id),
			bytes.NewReader(fmt.Appendf(nil, `{"actor":"conformance","comment":"comment %d"}`, n)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key.Secret)
		req.Header.Set("If-Match", fmt.Sprintf(`"%d"`, version))
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("comment %d: %d", n, resp.StatusCode)
		}
		version++
		return nil
	}
	return rowSetup{
		conf: fmt.Sprintf(`case_api:
  address: %s
  db_url: %s
  query_timeout: 2s
`, addr, u.String()),
		lose: p.proxy.Cut, restore: p.proxy.Restore,
		feed: func(n int) {
			deadline := time.Now().Add(stepWait)
			for err := comment(n); err != nil; err = comment(n) {
				if time.Now().After(deadline) {
					t.Fatalf("comment %d not made within %v: %v", n, stepWait, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		},
	}
}
