package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"slices"
)

// Key is an AES key and the ID written next to every payload it encrypts,
// so that a codec holding several keys decrypts each payload with the right
// one.
type Key struct {
	// ID names the key. It is stored in the clear with each payload, so it
	// must not be secret: a date or a version ("2025-06", "v2"). At most 255
	// bytes. Empty is allowed when there is one key.
	ID string
	// Secret is the AES key: 32 bytes for AES-256 (16 or 24 for AES-128 or
	// -192). Generate one with `openssl rand -base64 32` and decode it.
	Secret []byte
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
// payload. To rotate, make the new key current and pass the previous one in
// old until no stored payload needs it.
func AESGCMKeys(current Key, old ...Key) (PayloadCodec, error) {
	c := &aesGCM{current: current.ID, keys: map[string]cipher.AEAD{}}
	for _, k := range append([]Key{current}, old...) {
		if len(k.ID) > 255 {
			return nil, fmt.Errorf("aes-gcm codec: key ID %.20q... is %d bytes, the limit is 255", k.ID, len(k.ID))
		}
		if _, dup := c.keys[k.ID]; dup {
			return nil, fmt.Errorf("aes-gcm codec: two keys have the ID %q: give each key its own ID", k.ID)
		}
		switch len(k.Secret) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("aes-gcm codec: key %q is %d bytes; an AES key is 32 bytes (AES-256), or 16 or 24", k.ID, len(k.Secret))
		}
		block, err := aes.NewCipher(slices.Clone(k.Secret))
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("aes-gcm codec: key %q: %w", k.ID, err)
		}
		c.keys[k.ID] = aead
	}
	return c, nil
}

// aesGCM is the AES-GCM codec. An encoded payload is
//
//	format (1 byte) | key ID length (1 byte) | key ID | nonce (12) | ciphertext | tag (16)
//
// and the header before the nonce is authenticated with the ciphertext, so
// the key ID cannot be changed either.
type aesGCM struct {
	current string
	keys    map[string]cipher.AEAD
}

func (c *aesGCM) Encode(payload []byte) ([]byte, error) {
	aead := c.keys[c.current]
	header := make([]byte, 0, 2+len(c.current))
	header = append(header, aesFormat, byte(len(c.current)))
	header = append(header, c.current...)
	out := make([]byte, len(header), len(header)+len(payload)+aead.Overhead())
	copy(out, header)
	return aead.Seal(out, nil, payload, header), nil
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
	header, id := stored[:2+n], string(stored[2:2+n])
	aead, ok := c.keys[id]
	if !ok {
		return nil, fmt.Errorf("aes-gcm: payload was encrypted with key %q, which this codec does not have (it has %s): pass that key to AESGCMKeys as an old key", id, c.ids())
	}
	p, err := aead.Open(nil, nil, stored[2+n:], header)
	if err != nil {
		return nil, fmt.Errorf("aes-gcm: payload does not decrypt with key %q: the key is wrong or the stored payload was changed", id)
	}
	return p, nil
}

// ids lists the codec's key IDs, for errors.
func (c *aesGCM) ids() string {
	ids := make([]string, 0, len(c.keys))
	for id := range c.keys {
		ids = append(ids, fmt.Sprintf("%q", id))
	}
	slices.Sort(ids)
	return fmt.Sprint(ids)
}
