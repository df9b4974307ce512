// Package uuid is a stub of github.com/google/uuid.
package uuid

type UUID [16]byte

func NewString() string                    { return "" }
func NewSHA1(space UUID, data []byte) UUID { return UUID{} }
func (u UUID) String() string              { return "" }
