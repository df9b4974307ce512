package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// PayloadCodec encodes payloads before they are stored and decodes them
// after they are read. Encode and Decode are called concurrently.
//
// Decode must undo Encode: Decode(Encode(p)) returns p. Decode is also
// called on payloads written under earlier configurations (older keys),
// which it must either decode or reject with an error that says which key
// or codec it would need.
type PayloadCodec interface {
	// Encode returns the form of payload to store.
	Encode(payload []byte) ([]byte, error)
	// Decode returns the payload that Encode turned into stored.
	Decode(stored []byte) ([]byte, error)
}

// EnvelopeKey is the one field of the JSON object that holds an encoded
// payload: {"durable_codec":"<base64 of the codec's output>"}.
const EnvelopeKey = "durable_codec"

// ErrNoCodec is returned by Unwrap for an encoded payload when there is no
// codec to decode it.
var ErrNoCodec = errors.New("payload is encoded (a " + EnvelopeKey + " envelope) but no codec was given: set engine.Options.Codec to the codec that wrote it")

// Wrap encodes payload with c and returns the envelope to store. An empty
// payload, or a nil c, gives payload back as it is.
func Wrap(c PayloadCodec, payload json.RawMessage) (json.RawMessage, error) {
	if c == nil || len(payload) == 0 {
		return payload, nil
	}
	enc, err := c.Encode(payload)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	out := make([]byte, 0, len(envelopePrefix)+base64.StdEncoding.EncodedLen(len(enc))+len(envelopeSuffix))
	out = append(out, envelopePrefix...)
	out = base64.StdEncoding.AppendEncode(out, enc)
	out = append(out, envelopeSuffix...)
	return out, nil
}

// Unwrap returns the payload that stored holds: decoded with c if stored is
// an envelope, stored itself if not (a payload written without a codec). It
// returns ErrNoCodec for an envelope when c is nil, and an error if the
// envelope is corrupt, c cannot decode it, or what c decoded is not JSON.
func Unwrap(c PayloadCodec, stored json.RawMessage) (json.RawMessage, error) {
	b64, ok := parseEnvelope(stored)
	if !ok {
		return stored, nil
	}
	if c == nil {
		return nil, ErrNoCodec
	}
	enc, err := base64.StdEncoding.DecodeString(string(b64))
	if err != nil {
		return nil, fmt.Errorf("corrupt %s envelope: %w", EnvelopeKey, err)
	}
	p, err := c.Decode(enc)
	if err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	if !json.Valid(p) {
		return nil, fmt.Errorf("decode payload: the codec returned %d bytes that are not JSON", len(p))
	}
	return p, nil
}

// IsWrapped reports whether stored is an envelope made by Wrap.
func IsWrapped(stored json.RawMessage) bool {
	_, ok := parseEnvelope(stored)
	return ok
}

const (
	envelopePrefix = `{"` + EnvelopeKey + `":"`
	envelopeSuffix = `"}`
)

// parseEnvelope returns the base64 text of an envelope: a JSON object whose
// one field is EnvelopeKey and whose value is a string of base64 characters,
// with any JSON whitespace between the tokens (jsonb writes a space after
// the colon). Anything else is not an envelope. It reads only the bytes of
// the envelope's shape, so a plain payload costs a few comparisons.
func parseEnvelope(b []byte) ([]byte, bool) {
	b = skipSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	b = skipSpace(b[1:])
	key := `"` + EnvelopeKey + `"`
	if !bytes.HasPrefix(b, []byte(key)) {
		return nil, false
	}
	b = skipSpace(b[len(key):])
	if len(b) == 0 || b[0] != ':' {
		return nil, false
	}
	b = skipSpace(b[1:])
	if len(b) == 0 || b[0] != '"' {
		return nil, false
	}
	b = b[1:]
	end := 0
	for end < len(b) && isBase64(b[end]) {
		end++
	}
	if end == len(b) || b[end] != '"' {
		return nil, false
	}
	val := b[:end]
	rest := skipSpace(b[end+1:])
	if len(rest) == 0 || rest[0] != '}' || len(skipSpace(rest[1:])) != 0 {
		return nil, false
	}
	return val, true
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

func isBase64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
}
