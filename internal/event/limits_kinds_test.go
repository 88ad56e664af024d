package event_test

import (
	"slices"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// TestIdentifierKindsAreIdentitys: the envelope's identifier kinds are the
// ones package identity protects, no more, no fewer.
func TestIdentifierKindsAreIdentitys(t *testing.T) {
	want := []string{string(identity.KindIBAN), string(identity.KindAccountNumber), string(identity.KindPhone)}
	if !slices.Equal(event.IdentifierKinds, want) {
		t.Errorf("event.IdentifierKinds = %v, identity's kinds are %v", event.IdentifierKinds, want)
	}
}
