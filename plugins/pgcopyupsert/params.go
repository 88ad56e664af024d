package pgcopyupsert

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/speculapro/speculapro/internal/event"
)

// ptrArray is a one-dimensional array parameter whose elements pgx encodes
// through a pointer to each: a slice of IDs or texts passed as []T makes pgx
// box every element into an any (an allocation each) and encode it through
// reflection, while a pointer boxes for free and pgtype's valuer types
// (pgtype.UUID, pgtype.Text, pgtype.Timestamptz, bytea) encode directly.
type ptrArray[T any] []T

func (a ptrArray[T]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a ptrArray[T]) Index(i int) any { return &a[i] }

func (a ptrArray[T]) IndexType() any { return new(T) }

// bytea is a bytea element; nil is NULL.
type bytea []byte

func (b *bytea) BytesValue() ([]byte, error) { return *b, nil }

func uuidArray(ids []event.UUID) ptrArray[pgtype.UUID] {
	a := make(ptrArray[pgtype.UUID], len(ids))
	for i, id := range ids {
		a[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return a
}

// textArray: a nil element is NULL.
func textArray(ss []*string) ptrArray[pgtype.Text] {
	a := make(ptrArray[pgtype.Text], len(ss))
	for i, s := range ss {
		if s != nil {
			a[i] = pgtype.Text{String: *s, Valid: true}
		}
	}
	return a
}

// optionalTextArray: an empty element is NULL (textOrNil's rule).
func optionalTextArray(ss []string) ptrArray[pgtype.Text] {
	a := make(ptrArray[pgtype.Text], len(ss))
	for i, s := range ss {
		a[i] = pgtype.Text{String: s, Valid: s != ""}
	}
	return a
}

func stringArray(ss []string) ptrArray[pgtype.Text] {
	a := make(ptrArray[pgtype.Text], len(ss))
	for i, s := range ss {
		a[i] = pgtype.Text{String: s, Valid: true}
	}
	return a
}

// byteaArray: a nil element is NULL.
func byteaArray(bs [][]byte) ptrArray[bytea] {
	a := make(ptrArray[bytea], len(bs))
	for i, b := range bs {
		a[i] = b
	}
	return a
}

func timeArray(ts []time.Time) ptrArray[pgtype.Timestamptz] {
	a := make(ptrArray[pgtype.Timestamptz], len(ts))
	for i, t := range ts {
		a[i] = pgtype.Timestamptz{Time: t, Valid: true}
	}
	return a
}
