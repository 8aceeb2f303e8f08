package main

import (
	"crypto/sha256"
)

// tokenSealKey is the key sandbox tokens are sealed with in the store,
// derived from the daemon's own key, so a restarted daemon (same token
// file) still opens them; a new token file leaves old ones unopenable.
func tokenSealKey(daemonKey string) []byte {
	if daemonKey == "" {
		return nil
	}
	k := sha256.Sum256([]byte("cove sandbox token seal\x00" + daemonKey))
	return k[:]
}
