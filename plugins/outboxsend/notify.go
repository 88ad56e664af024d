package outboxsend

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// summary is what a notification says, read from the payload the stream
// queued (type, id, created_at and, for an alert, its severity, title and
// id). It names no customer or account: the payload's customer_id and
// account_id stay out, as does anything a rule read.
type summary struct {
	Kind     string
	Severity string
	Title    string
	AlertID  string
	Created  string
}

func summaryOf(j *job) summary {
	var p struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		CreatedAt string `json:"created_at"`
		Alert     struct {
			ID       string `json:"id"`
			Severity string `json:"severity"`
			Title    string `json:"title"`
		} `json:"alert"`
	}
	_ = json.Unmarshal(j.body, &p) // a payload of another shape still notifies, with less
	s := summary{Kind: j.eventType, Severity: p.Alert.Severity, Title: oneLine(p.Alert.Title), AlertID: p.Alert.ID, Created: p.CreatedAt}
	if s.AlertID == "" && strings.HasPrefix(s.Kind, "alert.") {
		s.AlertID = p.ID
	}
	if t, err := time.Parse(time.RFC3339Nano, s.Created); err == nil {
		s.Created = t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return s
}

// oneLine keeps a title on one line and within a mail subject's length.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 150 {
		s = string(r[:150]) + "…"
	}
	return s
}

func (s summary) subject() string {
	if s.Severity != "" {
		return fmt.Sprintf("[SpeculaPro] %s alert: %s", s.Severity, s.Title)
	}
	return "[SpeculaPro] " + s.Kind
}

// text is the plain-text body of a mail or a chat message.
func (s summary) text(notificationID string) string {
	var b strings.Builder
	if s.Kind == "alert.created" {
		b.WriteString("A new alert was raised in SpeculaPro.\n\n")
	} else {
		fmt.Fprintf(&b, "SpeculaPro: %s.\n\n", s.Kind)
	}
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-10s %s\n", k+":", v)
		}
	}
	line("Severity", s.Severity)
	line("Title", s.Title)
	line("Alert", s.AlertID)
	line("Raised", s.Created)
	b.WriteString("\nOpen the alert in SpeculaPro to see who and what it concerns; this message carries no customer or account identifier.\n")
	fmt.Fprintf(&b, "\n(notification %s)\n", notificationID)
	return b.String()
}

// chatBody is a webhook notification's JSON: {"text": …} as chat incoming
// webhooks expect, and the same facts as fields.
func chatBody(j *job) ([]byte, error) {
	s := summaryOf(j)
	body := map[string]any{
		"text":            strings.TrimSpace(s.subject() + "\n" + s.text(j.id.String())),
		"kind":            s.Kind,
		"notification_id": j.id.String(),
	}
	if s.AlertID != "" {
		body["alert_id"] = s.AlertID
		body["severity"] = s.Severity
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the notification: %w", err)
	}
	return b, nil
}
