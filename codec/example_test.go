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
	// aes-gcm codec: key "" is 20 bytes; an AES key is 32 bytes (AES-256), or 16 or 24
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
