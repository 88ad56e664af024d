package apikey

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestNewKeyHashesToItsStoredForm(t *testing.T) {
	a, err := New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if a.Secret == b.Secret || bytes.Equal(a.Hash, b.Hash) {
		t.Fatal("two new keys are equal")
	}
	if !strings.HasPrefix(a.Secret, Prefix) || len(a.Secret) != len(Prefix)+64 {
		t.Fatalf("key %q: want %s and 64 hex characters", a.Display, Prefix)
	}
	if !strings.HasPrefix(a.Secret, a.Display) || len(a.Display) != len(Prefix)+8 {
		t.Fatalf("display prefix %q is not the key's beginning", a.Display)
	}
	h, err := Hash(a.Secret)
	if err != nil || !bytes.Equal(h, a.Hash) || len(h) != 32 {
		t.Fatalf("Hash(new key) = %x, %v; want %x", h, err, a.Hash)
	}
}

func TestHashRefusesMalformedKeys(t *testing.T) {
	k, _ := New()
	for _, s := range []string{
		"", "spk_", "Bearer " + k.Secret, k.Secret[len(Prefix):], k.Secret + "0", k.Secret[:len(k.Secret)-1],
		Prefix + strings.Repeat("zz", 32), strings.ToUpper(k.Secret[:3]) + k.Secret[3:],
	} {
		if _, err := Hash(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Hash(%.12q…) = %v; want ErrMalformed", s, err)
		}
	}
}
