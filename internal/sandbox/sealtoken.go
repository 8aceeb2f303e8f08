package sandbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/cove-sandbox/cove/internal/store"
	"github.com/cove-sandbox/cove/internal/tenant"
)

// ErrTokenUnavailable is a token that cannot be given again: no sealed copy (a sandbox made before sealing, or
// by a daemon without a seal key) or one sealed under another key.
// It is a conflict (409): the sandbox is there, its token is not.
var ErrTokenUnavailable = fmt.Errorf("%w: the sandbox's token cannot be given again", ErrConflict)

// sealToken keeps token sealed beside sandbox id's record. The sandbox id
// is the sealed data's associated data, so a sealed token copied to
// another row does not open.
func (s *Service) sealToken(ctx context.Context, id, token string) error {
	if len(s.cfg.TokenSealKey) == 0 {
		return nil
	}
	aead, err := sealAEAD(s.cfg.TokenSealKey)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("seal token: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, []byte(token), []byte(id))
	return s.cfg.Store.PutSealedToken(ctx, id, base64.RawStdEncoding.EncodeToString(sealed))
}

// RevealToken gives sandbox id's token again, to a key of its own tenant
// that may see tokens (tenant.Principal.RevealTokens): an admin of another
// tenant may manage the sandbox but is not handed its credential. Another
// tenant's sandbox is not found, as elsewhere.
func (s *Service) RevealToken(ctx context.Context, id string) (string, error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return "", err
	}
	p, ok := tenant.FromContext(ctx)
	if !ok || !p.RevealTokens || p.Tenant != b.owner() {
		return "", fmt.Errorf("%w: this API key may not be given sandbox tokens (reveal_tokens is off, or the sandbox is another tenant's)", ErrForbidden)
	}
	return s.openToken(ctx, id)
}

// TokenForCheck is sandbox id's token for the daemon's own checks, which
// need the plain token (E2B's signed file URLs are a hash keyed by it):
// whoever asks, it must never be answered to a caller.
func (s *Service) TokenForCheck(ctx context.Context, id string) (string, error) {
	if _, err := s.lookup(ctx, id); err != nil {
		return "", err
	}
	return s.openToken(ctx, id)
}

func (s *Service) openToken(ctx context.Context, id string) (string, error) {
	if len(s.cfg.TokenSealKey) == 0 {
		return "", fmt.Errorf("%w: the daemon keeps no sealed tokens", ErrTokenUnavailable)
	}
	enc, err := s.cfg.Store.SealedToken(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: sandbox %s has no sealed token (made before tokens were sealed)", ErrTokenUnavailable, id)
	}
	if err != nil {
		return "", err
	}
	raw, err := base64.RawStdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("%w: sandbox %s: %v", ErrTokenUnavailable, id, err)
	}
	aead, err := sealAEAD(s.cfg.TokenSealKey)
	if err != nil {
		return "", err
	}
	if len(raw) < aead.NonceSize() {
		return "", fmt.Errorf("%w: sandbox %s: sealed token too short", ErrTokenUnavailable, id)
	}
	tok, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(id))
	if err != nil {
		return "", fmt.Errorf("%w: sandbox %s: sealed under another key", ErrTokenUnavailable, id)
	}
	return string(tok), nil
}

func sealAEAD(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("token seal key: %w", err)
	}
	return cipher.NewGCM(blk)
}
