package token

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// checkStrict refuses what the JWT library would accept but RFC 7515 and 7519 do not, and what
// two parsers could read differently, before anything else is looked at:
//
//   - duplicate keys, in the header or the claims, at any depth. encoding/json keeps the last
//     one and matches names without regard to case, other parsers keep the first, so an issuer
//     and the gateway could disagree on who the task is. Keys that differ only in case (as
//     Unicode folds it) count as duplicates for the same reason.
//   - a crit header: this verifier understands no extension, and RFC 7515 4.1.11 says to
//     reject a token that names one (an empty list is malformed).
//   - a typ other than JWT: a token minted for another purpose is not a task token.
//   - exp, iat or nbf that are not JSON numbers (a string "exp" would otherwise pass).
//   - segments that are not unpadded base64url.
func checkStrict(raw string) error {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return errors.New("token is malformed: a JWT has three dot-separated parts")
	}
	header, err := decodeSegment(parts[0])
	if err != nil {
		return fmt.Errorf("token is malformed: header: %v", err)
	}
	claims, err := decodeSegment(parts[1])
	if err != nil {
		return fmt.Errorf("token is malformed: claims: %v", err)
	}
	h, err := topLevel(header)
	if err != nil {
		return fmt.Errorf("token is malformed: header: %v", err)
	}
	if _, ok := h["crit"]; ok {
		var crit []string
		if json.Unmarshal(h["crit"], &crit) != nil || len(crit) == 0 {
			return errors.New("crit must be a non-empty list of header names (RFC 7515 4.1.11)")
		}
		return fmt.Errorf("the token requires extensions this verifier does not understand (crit %q)", crit)
	}
	if t, ok := h["typ"]; ok {
		var typ string
		if json.Unmarshal(t, &typ) != nil || !(strings.EqualFold(typ, "JWT") || strings.EqualFold(typ, "application/jwt")) {
			return fmt.Errorf("typ %s is not JWT", t)
		}
	}
	c, err := topLevel(claims)
	if err != nil {
		return fmt.Errorf("token is malformed: claims: %v", err)
	}
	for name, v := range c {
		switch strings.ToLower(name) {
		case "exp", "iat", "nbf":
			if len(v) == 0 || !(v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
				return fmt.Errorf("claim %q must be a number (seconds since the epoch), not %s", name, v)
			}
		}
	}
	return nil
}

// decodeSegment decodes one unpadded base64url segment.
func decodeSegment(s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, errors.New("not unpadded base64url")
	}
	return b, nil
}

// topLevel parses b as one JSON object, refusing duplicate keys at any depth (compared as
// encoding/json would match them to fields: case-insensitively), and returns its members.
func topLevel(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := checkValue(dec, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// maxDepth bounds nesting in a token.
const maxDepth = 32

// checkValue reads one JSON value from dec, refusing duplicate object keys in it.
func checkValue(dec *json.Decoder, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return errors.New("not JSON")
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return errors.New("not JSON")
			}
			key, _ := k.(string)
			f := fold(key)
			if seen[f] {
				return fmt.Errorf("key %q appears more than once", key)
			}
			seen[f] = true
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return errors.New("not JSON")
		}
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return errors.New("not JSON")
		}
	}
	return nil
}

// fold maps s to one spelling per case-insensitive class: each rune becomes the smallest rune of
// its simple case-folding orbit, so fold(a) == fold(b) exactly when strings.EqualFold(a, b).
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}
