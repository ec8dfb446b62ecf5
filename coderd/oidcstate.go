package coderd

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/hkdf"
)

// oidcState is what an OpenID Connect sign-in remembers between the
// redirect to the identity provider and the callback. It travels in a
// cookie sealed with AES-GCM under a key of the deployment (every replica
// can open it, the browser can neither read nor change it), and lives
// oidcStateLifetime.
type oidcState struct {
	// State is compared with the callback's state parameter (CSRF).
	State string `json:"s"`
	// Nonce is compared with the ID token's nonce claim (replay).
	Nonce string `json:"n"`
	// Verifier is the PKCE code verifier (S256) the code exchange sends.
	Verifier string `json:"v"`
	// Redirect is where the user goes once signed in (a local path).
	Redirect string    `json:"r"`
	Expires  time.Time `json:"e"`
}

// oidcStateCookie is the cookie's name; it is sent only to the callback.
const oidcStateCookie = "coder_oidc_state"

// oidcStateLifetime bounds the time a user may spend at the identity
// provider's login page.
const oidcStateLifetime = 10 * time.Minute

var errOIDCState = errors.New("the sign-in state is missing, expired or does not match: start the sign-in again")

// oidcSealer seals and opens oidcState values.
type oidcSealer struct{ aead cipher.AEAD }

// deploymentAEAD is AES-256-GCM under a key derived (HKDF-SHA256) from a
// deployment secret for one purpose: each purpose (the state cookie, the
// IdP refresh tokens at rest) gets its own key from the one secret.
func deploymentAEAD(secret, purpose string) (cipher.AEAD, error) {
	key := make([]byte, 32)
	if _, err := io.ReadFull(hkdf.New(sha256.New, []byte(secret), nil, []byte(purpose)), key); err != nil {
		return nil, fmt.Errorf("derive %s key: %w", purpose, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// newOIDCSealer derives the cookie key from a deployment secret.
func newOIDCSealer(secret string) (*oidcSealer, error) {
	aead, err := deploymentAEAD(secret, "coderd oidc state cookie")
	if err != nil {
		return nil, err
	}
	return &oidcSealer{aead: aead}, nil
}

func (s *oidcSealer) seal(st oidcState) (string, error) {
	plain, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(oidcStateCookie))), nil
}

// open returns the state sealed in cookie when it is intact, unexpired at
// now and its State equals state.
func (s *oidcSealer) open(cookie, state string, now time.Time) (oidcState, error) {
	var st oidcState
	raw, err := base64.RawURLEncoding.DecodeString(cookie)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return st, errOIDCState
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], []byte(oidcStateCookie))
	if err != nil {
		return st, errOIDCState
	}
	if err := json.Unmarshal(plain, &st); err != nil {
		return st, fmt.Errorf("decode sign-in state: %w", err)
	}
	if !now.Before(st.Expires) || state == "" || subtle.ConstantTimeCompare([]byte(st.State), []byte(state)) != 1 {
		return oidcState{}, errOIDCState
	}
	return st, nil
}
