package codec_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/durable-go/durable/codec"
)

// The key comes from where the workers keep secrets, never from the
// database: here an environment variable holding 32 random bytes in base64
// (`openssl rand -base64 32`). Give the codec to every engine:
//
//	eng, err := engine.New(pool, engine.Options{Codec: c})
//
// and every payload the engine stores is encrypted.
func ExampleAESGCM() {
	secret := "q2L8bJ0a3hX1vN7rT5yW9eK4sD6fG0hJ2kL4zX8cV1M=" // os.Getenv("DURABLE_PAYLOAD_KEY")
	key, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		panic(err)
	}
	c, err := codec.AESGCM(key)
	if err != nil {
		panic(err)
	}

	// What the engine does with each payload it stores, and reads back.
	stored, err := codec.Wrap(c, json.RawMessage(`{"email":"ada@example.com"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(strings.HasPrefix(string(stored), `{"durable_codec":"`), strings.Contains(string(stored), "ada"))
	payload, err := codec.Unwrap(c, stored)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(payload))

	_, err = codec.AESGCM(key[:20])
	fmt.Println(err)
	// Output:
	// true false
	// {"email":"ada@example.com"}
	// aes-gcm codec: key "" (fingerprint 84eb897e) is 20 bytes; an AES key is 32 bytes (AES-256), or 16 or 24
}

// To rotate keys, encrypt with a new key and keep the old one for reading
// until nothing stored needs it.
func ExampleAESGCMKeys() {
	oldKey := codec.Key{ID: "2025-01", Secret: []byte("0123456789abcdef0123456789abcdef")}
	newKey := codec.Key{ID: "2025-07", Secret: []byte("fedcba9876543210fedcba9876543210")}

	before, _ := codec.AESGCMKeys(oldKey)
	written, _ := codec.Wrap(before, json.RawMessage(`"written in January"`))

	after, err := codec.AESGCMKeys(newKey, oldKey)
	if err != nil {
		panic(err)
	}
	got, err := codec.Unwrap(after, written)
	fmt.Println(string(got), err)

	newer, _ := codec.Wrap(after, json.RawMessage(`"written in July"`))
	_, err = codec.Unwrap(before, newer)
	fmt.Println(err)
	// Output:
	// "written in January" <nil>
	// decode payload: aes-gcm: payload was encrypted with key "2025-07", which this codec does not have (it has ["2025-01"]): pass that key to AESGCMKeys as an old key
}

// payloadCodec builds a codec from a list of keys "id:base64key,..." (from
// an environment variable such as DURABLE_PAYLOAD_KEYS): the first key
// encrypts, every key decrypts. An ID may be empty (":base64key"), as the
// key of a codec made with AESGCM is. A rotation changes only the list.
func payloadCodec(list string) (codec.PayloadCodec, error) {
	var keys []codec.Key
	for i, entry := range strings.Split(list, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok {
			return nil, fmt.Errorf("payload keys: entry %d is not id:base64key", i+1)
		}
		secret, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("payload keys: key %q: %w", id, err)
		}
		keys = append(keys, codec.Key{ID: id, Secret: secret})
	}
	return codec.AESGCMKeys(keys[0], keys[1:]...)
}

// A key rotation in a fleet is three deploys that change only the list of
// keys. During each deploy engines of the stage before and of the new stage
// run side by side, so each must read what the other writes.
func Example_rotation() {
	oldKey := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	newKey := base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
	stages := []string{
		"2025-01:" + oldKey,                        // 0: before
		"2025-01:" + oldKey + ",2025-07:" + newKey, // 1: every engine can read the new key
		"2025-07:" + newKey + ",2025-01:" + oldKey, // 2: the new key encrypts
		"2025-07:" + newKey,                        // 3: nothing stored needs the old key
	}
	codecs := make([]codec.PayloadCodec, len(stages))
	written := make([]json.RawMessage, len(stages))
	for i, list := range stages {
		c, err := payloadCodec(list)
		if err != nil {
			panic(err)
		}
		codecs[i] = c
		written[i], _ = codec.Wrap(c, json.RawMessage(fmt.Sprintf(`"stage %d"`, i)))
		if i == 0 {
			continue
		}
		_, errNew := codec.Unwrap(c, written[i-1])
		_, errOld := codec.Unwrap(codecs[i-1], written[i])
		fmt.Printf("stages %d and %d read each other: %v\n", i-1, i, errNew == nil && errOld == nil)
	}
	_, err := codec.Unwrap(codecs[3], written[0])
	fmt.Println(err)
	// Output:
	// stages 0 and 1 read each other: true
	// stages 1 and 2 read each other: true
	// stages 2 and 3 read each other: true
	// decode payload: aes-gcm: payload was encrypted with key "2025-01", which this codec does not have (it has ["2025-07"]): pass that key to AESGCMKeys as an old key
}
