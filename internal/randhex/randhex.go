// Package randhex makes random identifiers and secrets.
package randhex

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns n random bytes from the system's CSPRNG, hex-encoded.
func New(n int) string {
	b := make([]byte, n)
	rand.Read(b) // crypto/rand.Read never fails on Linux.
	return hex.EncodeToString(b)
}
