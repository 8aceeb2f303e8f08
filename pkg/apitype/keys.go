package apitype

import "time"

// CreateKeyRequest is POST /v1/keys: a key for a tenant, with its quota
// (zero or absent: unlimited). Admin keys may manage keys and see every
// tenant.
type CreateKeyRequest struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	Admin  bool   `json:"admin,omitempty"`
	// RevealTokens lets the key be given its tenant's sandbox tokens after
	// create (GET /v1/sandboxes/{id}/token, E2B's connect); absent: true.
	RevealTokens *bool `json:"reveal_tokens,omitempty"`
	UsageQuota
}

// KeyInfo is an API key as GET /v1/keys lists it: never its secret or hash.
type KeyInfo struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Tenant string `json:"tenant"`
	Admin  bool   `json:"admin"`
	// RevealTokens: see CreateKeyRequest.
	RevealTokens bool `json:"reveal_tokens"`
	UsageQuota
	CreatedAt time.Time  `json:"created_at"`
	Revoked   bool       `json:"revoked"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// CreateKeyResponse answers POST /v1/keys. Key, the secret, appears here
// only: the daemon keeps its hash.
type CreateKeyResponse struct {
	Key string `json:"key"`
	KeyInfo
}

// SandboxTokenResponse answers GET /v1/sandboxes/{id}/token: the sandbox's
// token, for a key of its tenant allowed to see tokens.
type SandboxTokenResponse struct {
	Token string `json:"token"`
}
