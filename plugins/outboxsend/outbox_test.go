package outboxsend

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/outbox"
	"github.com/speculapro/speculapro/internal/retry"
	"github.com/speculapro/speculapro/internal/webhook"
)

func TestSettleClassifiesOutcomes(t *testing.T) {
	o := &outboxSend{maxAttempts: 3, policy: retry.Policy{MaxAttempts: 3, Initial: time.Second, Max: 4 * time.Second, Jitter: outbox.BackoffJitter}}
	tests := []struct {
		name    string
		attempt int32
		status  int
		err     error
		want    string
		gone    bool
	}{
		{"2xx", 1, 200, nil, outbox.OutcomeDelivered, false},
		{"500 first attempt", 1, 500, errors.New("HTTP 500"), outbox.OutcomeRetry, false},
		{"500 last attempt", 3, 500, errors.New("HTTP 500"), outbox.OutcomeFailed, false},
		{"timeout", 2, 0, errors.New("context deadline exceeded"), outbox.OutcomeRetry, false},
		{"410", 1, 410, errors.New("HTTP 410"), outbox.OutcomeFailed, true},
		{"redirect", 1, 302, fmt.Errorf("HTTP 302: %w", webhook.ErrRedirect), outbox.OutcomeFailed, false},
		{"blocked", 1, 0, fmt.Errorf("dial: %w", webhook.ErrBlockedAddress), outbox.OutcomeFailed, false},
		{"bad recipient", 1, 0, fmt.Errorf("x: %w", errPermanent), outbox.OutcomeFailed, false},
	}
	for _, tt := range tests {
		j := &job{attempt: tt.attempt}
		o.settle(j, tt.status, tt.err)
		if j.outcome != tt.want || j.gone != tt.gone {
			t.Errorf("%s: outcome %s gone %t, want %s %t", tt.name, j.outcome, j.gone, tt.want, tt.gone)
		}
		if j.outcome == outbox.OutcomeRetry {
			nominal := o.policy.Backoff(int(tt.attempt))
			if j.delay < nominal*8/10 || j.delay > nominal {
				t.Errorf("%s: delay %s outside 80-100 %% of %s", tt.name, j.delay, nominal)
			}
		}
	}
	long := &job{attempt: 1}
	o.settle(long, http.StatusInternalServerError, errors.New(strings.Repeat("é", 2000)))
	if len(long.errText) > maxErrorText {
		t.Errorf("last_error of %d bytes, want at most %d", len(long.errText), maxErrorText)
	}
}

// A notification says what happened and nothing that identifies a
// customer: not the details a rule read, not the customer or account id.
func TestNotificationTextCarriesNoIdentifier(t *testing.T) {
	j := &job{id: event.UUID{9}, eventType: "alert.created", body: []byte(`{"type":"alert.created","id":"a1","created_at":"2026-12-01T10:00:00.123456Z",
"alert":{"id":"a1","customer_id":"c-uuid","account_id":"acc-uuid","severity":"high","title":"Large\ntransfer","details":{"iban":"DE89370400440532013000"}}}`)}
	s := summaryOf(j)
	text := s.subject() + "\n" + s.text(j.id.String())
	for _, bad := range []string{"DE89370400440532013000", "c-uuid", "acc-uuid"} {
		if strings.Contains(text, bad) {
			t.Errorf("notification text carries %q:\n%s", bad, text)
		}
	}
	for _, want := range []string{"[SpeculaPro] high alert: Large transfer", "Severity:  high", "Alert:     a1", "2026-12-01 10:00:00 UTC"} {
		if !strings.Contains(text, want) {
			t.Errorf("notification text lacks %q:\n%s", want, text)
		}
	}
	body, err := chatBody(j)
	if err != nil || strings.Contains(string(body), "DE8937") || !strings.Contains(string(body), `"text":`) {
		t.Errorf("chat body %s, %v", body, err)
	}
}

func TestParseSMTPURL(t *testing.T) {
	c, err := parseSMTPURL("smtp://alerts%40bank.example:s3cret@mail.example:2525?from=alerts@bank.example")
	if err != nil || c.addr != "mail.example:2525" || c.user != "alerts@bank.example" || c.pass != "s3cret" || c.from != "alerts@bank.example" {
		t.Fatalf("parseSMTPURL = %+v, %v", c, err)
	}
	if c, err := parseSMTPURL("smtp://mail.example?from=a@b.example"); err != nil || c.addr != "mail.example:587" || c.hasCreds {
		t.Fatalf("default port: %+v, %v", c, err)
	}
	for _, bad := range []string{
		"smtps://u:s3cret@mail.example?from=a@b.example", // implicit TLS is not offered: STARTTLS always
		"smtp://u:s3cret@mail.example",                   // no from
		"smtp://u:s3cret@mail.example?from=nope",         // from not an address
		"smtp://u:s3cret@mail.example?from=a@b.example&ca_file=/does/not/exist",
		"::not a url s3cret",
	} {
		_, err := parseSMTPURL(bad)
		if err == nil {
			t.Errorf("parseSMTPURL(%q) accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("parseSMTPURL's error quotes the password: %v", err)
		}
	}
}

func TestSpecParsesItsDefaults(t *testing.T) {
	if _, err := outboxSendSpec().ParseYAML("encryption_key: k1:00", nil); err != nil {
		t.Errorf("outbox_send defaults: %v", err)
	}
}
