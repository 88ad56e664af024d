package applog

import (
	"context"
	"github.com/redpanda-data/benthos/v4/public/service"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// LevelTrace is the engine's trace level, below slog's Debug.
const LevelTrace = slog.LevelDebug - 4

// locationKeys are the fields the engine adds to say which component logged;
// they are useful, but they belong after the line's own fields.
var locationKeys = map[string]bool{"@service": true, "label": true, "path": true, "stream": true}

// New returns a logger writing logfmt lines to w at level and above.
func New(w io.Writer, level slog.Level) *slog.Logger {
	text := slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.LevelKey && a.Value.Any() == LevelTrace {
				return slog.String(slog.LevelKey, "TRACE")
			}
			return a
		},
	})
	return slog.New(&handler{text: text})
}

// ParseLevel reads ERROR, WARN, INFO, DEBUG, TRACE (any case), and OFF/NONE
// as "log nothing". Anything else is INFO, the engine's default.
func ParseLevel(s string) slog.Level {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "OFF", "NONE":
		return slog.LevelError + 100
	case "ERROR", "FATAL":
		return slog.LevelError
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "DEBUG":
		return slog.LevelDebug
	case "TRACE", "ALL":
		return LevelTrace
	default:
		return slog.LevelInfo
	}
}

// handler defers every With attribute to Handle, so that it can put the
// record's own attributes and the non-location With attributes before the
// engine's location fields. The engine builds a logger per component once,
// so the cost is per line, not per With.
type handler struct {
	text  slog.Handler
	attrs []slog.Attr
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.text.Enabled(ctx, l) }

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{text: h.text, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

// WithGroup is not used by the engine; groups would reorder badly, so a group
// is kept as a plain handler group on the underlying text handler.
func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{text: h.text.WithGroup(name), attrs: h.attrs}
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	var location []slog.Attr
	for _, a := range h.attrs {
		if locationKeys[a.Key] {
			// A nested component's path replaces its parent's: keep the last.
			location = slices.DeleteFunc(location, func(b slog.Attr) bool { return b.Key == a.Key })
			location = append(location, a)
		} else {
			out.AddAttrs(a)
		}
	}
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	out.AddAttrs(location...)
	return h.text.Handle(ctx, out)
}

// With adds key/value fields to an engine logger in the order given. The
// engine's Logger.With gathers one call's fields in a map, so a line logged
// with several fields in one call would print them in a random order; the
// documented lines (rows=… err=… backoff=…) must read the same every time,
// or a log search written against them would miss some.
func With(l *service.Logger, keyValues ...any) *service.Logger {
	for i := 0; i+1 < len(keyValues); i += 2 {
		l = l.With(keyValues[i], keyValues[i+1])
	}
	return l
}
