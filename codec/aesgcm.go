package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Key is an AES key and the ID written next to every payload it encrypts,
// so that a codec holding several keys decrypts each payload with the right
// one.
type Key struct {
	// ID names the key. It is stored in the clear with each payload, so it
	// must not be secret: a date or a version ("2025-06", "v2"). At most 255
	// bytes, and no two keys of a codec share one.
	//
	// Empty is allowed, for any number of keys (AESGCM's key has none): a
	// payload is then stored with an empty ID, and decoding one tries every
	// key of the codec, keys without an ID first, until one decrypts it
	// (AES-GCM authenticates, so a wrong key never decrypts). Errors name
	// such a key by its Fingerprint. Prefer IDs: they pick the key at once
	// and say which key a payload needs.
	ID string
	// Secret is the AES key: 32 bytes for AES-256 (16 or 24 for AES-128 or
	// -192). Generate one with `openssl rand -base64 32` and decode it.
	Secret []byte
}

// Fingerprint returns 8 hex digits that tell keys apart without revealing
// them: the first 4 bytes of an HMAC-SHA256 of a fixed text under the
// secret. Errors name keys without an ID by it, so it may end up in logs
// and in a run's task error; compare it with the fingerprints of the keys
// you hold to find the one an engine has.
func (k Key) Fingerprint() string {
	m := hmac.New(sha256.New, k.Secret)
	m.Write([]byte("durable codec key fingerprint"))
	return hex.EncodeToString(m.Sum(nil)[:4])
}

// name is how errors name k: its ID, and its fingerprint if the ID is empty.
func (k Key) name() string {
	if k.ID == "" {
		return `"" (fingerprint ` + k.Fingerprint() + ")"
	}
	return strconv.Quote(k.ID)
}

// aesFormat is the first byte of every payload AESGCM encodes; a later
// format gets a new number.
const aesFormat = 1

// AESGCM returns a codec that encrypts payloads with AES-GCM under key (32
// bytes for AES-256; 16 or 24 for AES-128 or -192), with a random nonce per
// payload. Encrypted payloads cannot be read or changed without the key:
// a changed payload fails to decode.
//
// A random 96-bit nonce limits one key to about 2^32 (4 billion) payloads;
// rotate keys well before (see AESGCMKeys).
func AESGCM(key []byte) (PayloadCodec, error) {
	return AESGCMKeys(Key{Secret: key})
}

// AESGCMKeys returns an AES-GCM codec that encrypts with current and
// decrypts with current or any of old, chosen by the key ID stored with each
// payload (see Key.ID for keys without one). To rotate, make the new key
// current and pass the previous one in old until no stored payload needs it;
// docs/encryption.md shows the steps for a fleet of engines.
func AESGCMKeys(current Key, old ...Key) (PayloadCodec, error) {
	c := &aesGCM{byID: map[string]aesKey{}}
	var unnamed, named []aesKey
	for i, k := range append([]Key{current}, old...) {
		if len(k.ID) > 255 {
			return nil, fmt.Errorf("aes-gcm codec: key ID %.20q... is %d bytes, the limit is 255", k.ID, len(k.ID))
		}
		if _, dup := c.byID[k.ID]; dup && k.ID != "" {
			return nil, fmt.Errorf("aes-gcm codec: two keys have the ID %q: give each key its own ID", k.ID)
		}
		switch len(k.Secret) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("aes-gcm codec: key %s is %d bytes; an AES key is 32 bytes (AES-256), or 16 or 24", k.name(), len(k.Secret))
		}
		block, err := aes.NewCipher(slices.Clone(k.Secret))
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %s: %w", k.name(), err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %s: %w", k.name(), err)
		}
		ak := aesKey{id: k.ID, name: k.name(), aead: aead}
		if i == 0 {
			c.current = ak
		}
		if k.ID == "" {
			unnamed = append(unnamed, ak)
			continue
		}
		c.byID[k.ID] = ak
		named = append(named, ak)
	}
	c.all = append(unnamed, named...)
	return c, nil
}

// aesGCM is the AES-GCM codec. An encoded payload is
//
//	format (1 byte) | key ID length (1 byte) | key ID | nonce (12) | ciphertext | tag (16)
//
// and the header before the nonce is authenticated with the ciphertext, so
// the key ID cannot be changed either.
type aesGCM struct {
	current aesKey
	byID    map[string]aesKey // the keys with an ID
	all     []aesKey          // every key, those without an ID first: for payloads without an ID
}

// aesKey is one key of an aesGCM.
type aesKey struct {
	id   string
	name string // for errors
	aead cipher.AEAD
}

func (c *aesGCM) Encode(payload []byte) ([]byte, error) {
	k := c.current
	header := make([]byte, 0, 2+len(k.id))
	header = append(header, aesFormat, byte(len(k.id)))
	header = append(header, k.id...)
	out := make([]byte, len(header), len(header)+len(payload)+k.aead.Overhead())
	copy(out, header)
	return k.aead.Seal(out, nil, payload, header), nil
}

func (c *aesGCM) Decode(stored []byte) ([]byte, error) {
	if len(stored) < 2 {
		return nil, errors.New("aes-gcm: payload is too short to be one this codec encrypted")
	}
	if stored[0] != aesFormat {
		return nil, fmt.Errorf("aes-gcm: payload has format %d, this build reads format %d", stored[0], aesFormat)
	}
	n := int(stored[1])
	if len(stored) < 2+n {
		return nil, errors.New("aes-gcm: payload is cut short in its key ID")
	}
	header, id, sealed := stored[:2+n], string(stored[2:2+n]), stored[2+n:]
	if id == "" {
		// Written by a key without an ID: whichever key opens it wrote it.
		for _, k := range c.all {
			if p, err := k.aead.Open(nil, nil, sealed, header); err == nil {
				return p, nil
			}
		}
		return nil, fmt.Errorf("aes-gcm: payload does not decrypt with key \"\": the key is wrong or the stored payload was changed "+
			"(a payload stored without a key ID was tried with every key of this codec: %s)", c.names())
	}
	k, ok := c.byID[id]
	if !ok {
		return nil, fmt.Errorf("aes-gcm: payload was encrypted with key %q, which this codec does not have (it has %s): pass that key to AESGCMKeys as an old key", id, c.names())
	}
	p, err := k.aead.Open(nil, nil, sealed, header)
	if err != nil {
		return nil, fmt.Errorf("aes-gcm: payload does not decrypt with key %q: the key is wrong or the stored payload was changed", id)
	}
	return p, nil
}

// names lists the codec's keys, for errors.
func (c *aesGCM) names() string {
	names := make([]string, 0, len(c.all))
	for _, k := range c.all {
		names = append(names, k.name)
	}
	slices.Sort(names)
	return "[" + strings.Join(names, ", ") + "]"
}
