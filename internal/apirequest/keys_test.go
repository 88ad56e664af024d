package apirequest

import (
	"fmt"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// The key cache is an LRU: over its size the least recently used entry
// goes, the others stay (a cache wiped whole when full would send every
// key back to the database at once).
func TestKeyLRUEvictsLeastRecentlyUsed(t *testing.T) {
	c := newLRU[event.UUID](3)
	now := time.Now()
	exp := now.Add(time.Minute)
	for i := range 3 {
		c.put(fmt.Sprint(i), event.UUID{byte(i)}, exp)
	}
	c.get("0", now) // 1 is now the least recently used
	c.put("3", event.UUID{3}, exp)
	if _, _, ok := c.get("1", now); ok {
		t.Error("the least recently used entry was kept")
	}
	for _, k := range []string{"0", "2", "3"} {
		if _, fresh, ok := c.get(k, now); !ok || !fresh {
			t.Errorf("entry %s was dropped", k)
		}
	}
	if _, fresh, ok := c.get("0", exp.Add(time.Second)); !ok || fresh {
		t.Errorf("entry past its expiry: ok=%v fresh=%v, want kept but stale", ok, fresh)
	}
	if c.len() != 3 {
		t.Errorf("%d entries, want 3", c.len())
	}
}
