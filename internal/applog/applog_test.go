package applog

import (
	"bytes"
	"context"
	"github.com/redpanda-data/benthos/v4/public/service"
	"log/slog"
	"strings"
	"testing"
)

func TestLinesReadLikeTheSpec(t *testing.T) {
	cases := []struct {
		name string
		log  func(l *slog.Logger)
		want string
	}{
		{
			name: "dead letters",
			log: func(l *slog.Logger) {
				l.With("@service", "speculapro", "path", "root.output", "stream", "persist").With("count", 3).
					Warn("persist: sent undecodable records to dead-letter topic")
			},
			want: `level=WARN msg="persist: sent undecodable records to dead-letter topic" count=3 @service=speculapro path=root.output stream=persist`,
		},
		{
			name: "retry",
			log: func(l *slog.Logger) {
				l.With("path", "root.output").With("path", "root.output.retry").Error("persist: batch failed, retrying", "rows", 5000, "err", "connection refused", "backoff", "1.2s")
			},
			want: `level=ERROR msg="persist: batch failed, retrying" rows=5000 err="connection refused" backoff=1.2s path=root.output.retry`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			c.log(New(&buf, slog.LevelInfo))
			line := strings.TrimSpace(buf.String())
			// The time comes first and changes; everything after it must match.
			if i := strings.Index(line, " level="); i < 0 || line[i+1:] != c.want {
				t.Errorf("got  %s\nwant time=… %s", line, c.want)
			}
		})
	}
}

func TestLevels(t *testing.T) {
	cases := []struct {
		setting string
		logs    []slog.Level
		printed int
	}{
		{"INFO", []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn}, 2},
		{"warn", []slog.Level{slog.LevelInfo, slog.LevelWarn, slog.LevelError}, 2},
		{"TRACE", []slog.Level{LevelTrace, slog.LevelDebug}, 2},
		{"NONE", []slog.Level{slog.LevelError}, 0},
		{"bogus", []slog.Level{slog.LevelDebug, slog.LevelInfo}, 1},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		l := New(&buf, ParseLevel(c.setting))
		for _, lv := range c.logs {
			l.Log(context.Background(), lv, "m")
		}
		if got := strings.Count(buf.String(), "\n"); got != c.printed {
			t.Errorf("SP_LOG_LEVEL=%s printed %d lines, want %d:\n%s", c.setting, got, c.printed, buf.String())
		}
	}
	var buf bytes.Buffer
	New(&buf, LevelTrace).Log(context.Background(), LevelTrace, "t")
	if !strings.Contains(buf.String(), "level=TRACE") {
		t.Errorf("trace line reads %q, want level=TRACE", buf.String())
	}
}

// The engine's Logger.With keeps one call's fields in a map; With must keep
// the documented line's order on every run, not on most.
func TestWithKeepsFieldOrder(t *testing.T) {
	var buf bytes.Buffer
	l := service.NewLoggerFromSlog(New(&buf, slog.LevelInfo))
	for range 50 {
		With(l, "rows", 5000, "err", "connection refused", "backoff", "1s").Error("persist: batch failed, retrying")
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, `msg="persist: batch failed, retrying" rows=5000 err="connection refused" backoff=1s`) {
			t.Fatalf("fields out of order: %s", line)
		}
	}
}
