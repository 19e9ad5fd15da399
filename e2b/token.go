package e2b

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// A sandbox's access token (envdAccessToken) carries the API key that created it, sealed
// (AES-256-GCM) under a key derived from the deployment's node secret, and bound to the
// sandbox's id: the sandbox API's calls come with the token alone, and are made as that key.
// Nothing is stored: a token opens on any node, only for its own sandbox, and stops working
// when its key is removed from the configuration or its lease ends.

// tokenPrefix marks (and versions) a sealed access token.
const tokenPrefix = "e2b1."

var errBadToken = errors.New("the access token is not one this deployment issued for this sandbox")

type sealer struct{ aead cipher.AEAD }

func newSealer(secret []byte) (*sealer, error) {
	if len(secret) < 16 {
		return nil, errors.New("e2b: the access tokens need a secret of at least 16 bytes (the node secret)")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("airlock e2b envd access token v1"))
	block, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal makes sandbox's access token for key.
func (s *sealer) seal(sandbox, key string) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(key)+s.aead.Overhead())
	rand.Read(nonce)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(key), []byte(sandbox)))
}

// open returns the API key in sandbox's access token tok.
func (s *sealer) open(sandbox, tok string) (string, error) {
	b64, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok || len(b64) > 4096 {
		return "", errBadToken
	}
	b, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(b) < s.aead.NonceSize()+s.aead.Overhead() {
		return "", errBadToken
	}
	n := s.aead.NonceSize()
	key, err := s.aead.Open(nil, b[:n], b[n:], []byte(sandbox))
	if err != nil {
		return "", errBadToken
	}
	return string(key), nil
}
