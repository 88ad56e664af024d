package apirequest

import (
	"github.com/speculapro/speculapro/internal/event"
)

// The API writes its JSON with internal/event's writer, the one that writes
// the records (event.AppendRecord), so that an answer and a record escape
// text alike.

// AppendHTMLSafeString appends s quoted as json.Marshal writes an answer's
// string, '<', '>' and '&' escaped too.
func AppendHTMLSafeString(dst []byte, s string) []byte { return event.AppendJSONString(dst, s, true) }

// AppendUUIDText appends a UUID's text (event.AppendUUIDText).
func AppendUUIDText(dst []byte, u event.UUID) []byte { return event.AppendUUIDText(dst, u) }
