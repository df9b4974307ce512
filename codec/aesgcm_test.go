package codec_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/codec"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestAESGCMRoundTripsWithFreshNonces(t *testing.T) {
	t.Parallel()
	c, err := codec.AESGCM(key(1))
	require.NoError(t, err)
	p := []byte(`{"card":"4111 1111 1111 1111"}`)
	a, err := c.Encode(p)
	require.NoError(t, err)
	b, err := c.Encode(p)
	require.NoError(t, err)
	require.NotEqual(t, a, b, "each payload gets its own nonce")
	require.NotContains(t, string(a), "4111")
	got, err := c.Decode(a)
	require.NoError(t, err)
	require.Equal(t, p, got)
}

func TestAESGCMKeyLengths(t *testing.T) {
	t.Parallel()
	for _, n := range []int{16, 24, 32} {
		_, err := codec.AESGCM(make([]byte, n))
		require.NoError(t, err, "%d-byte key", n)
	}
	for _, n := range []int{0, 15, 31, 33, 64} {
		_, err := codec.AESGCM(make([]byte, n))
		require.ErrorContains(t, err, "an AES key is 32 bytes", "%d-byte key", n)
	}
	_, err := codec.AESGCMKeys(codec.Key{ID: "a", Secret: key(1)}, codec.Key{ID: "a", Secret: key(2)})
	require.ErrorContains(t, err, `two keys have the ID "a"`)
	_, err = codec.AESGCMKeys(codec.Key{ID: string(make([]byte, 256)), Secret: key(1)})
	require.ErrorContains(t, err, "the limit is 255")
}

func TestAESGCMDoesNotKeepTheCallersKeySlice(t *testing.T) {
	t.Parallel()
	k := key(1)
	c, err := codec.AESGCM(k)
	require.NoError(t, err)
	enc, err := c.Encode([]byte(`1`))
	require.NoError(t, err)
	clear(k) // the caller wipes its copy
	got, err := c.Decode(enc)
	require.NoError(t, err)
	require.Equal(t, `1`, string(got))
}

func TestAESGCMRejectsWrongKeysAndChanges(t *testing.T) {
	t.Parallel()
	c, err := codec.AESGCM(key(1))
	require.NoError(t, err)
	enc, err := c.Encode([]byte(`"secret"`))
	require.NoError(t, err)

	other, err := codec.AESGCM(key(2))
	require.NoError(t, err)
	_, err = other.Decode(enc)
	require.ErrorContains(t, err, `does not decrypt with key "": the key is wrong or the stored payload was changed`)

	for i := range enc {
		changed := bytes.Clone(enc)
		changed[i] ^= 0x01
		_, err := c.Decode(changed)
		require.Error(t, err, "a change to byte %d is detected", i)
	}
	for _, short := range [][]byte{nil, {1}, {1, 5, 'a'}, enc[:len(enc)-1]} {
		_, err := c.Decode(short)
		require.Error(t, err)
	}
	_, err = c.Decode(append([]byte{9}, enc[1:]...))
	require.ErrorContains(t, err, "format 9")
}

func TestAESGCMKeysRotate(t *testing.T) {
	t.Parallel()
	old, err := codec.AESGCMKeys(codec.Key{ID: "2024", Secret: key(1)})
	require.NoError(t, err)
	encOld, err := old.Encode([]byte(`"old"`))
	require.NoError(t, err)

	rotated, err := codec.AESGCMKeys(codec.Key{ID: "2025", Secret: key(2)}, codec.Key{ID: "2024", Secret: key(1)})
	require.NoError(t, err)
	got, err := rotated.Decode(encOld)
	require.NoError(t, err, "the old key still decodes what it wrote")
	require.Equal(t, `"old"`, string(got))
	encNew, err := rotated.Encode([]byte(`"new"`))
	require.NoError(t, err)

	_, err = old.Decode(encNew)
	require.ErrorContains(t, err, `encrypted with key "2025", which this codec does not have (it has ["2024"])`)

	// An unknown key ID is refused even when the secret would match: the
	// header is authenticated.
	renamed, err := codec.AESGCMKeys(codec.Key{ID: "2025", Secret: key(1)})
	require.NoError(t, err)
	_, err = renamed.Decode(encOld)
	require.ErrorContains(t, err, `key "2024"`)
}

func TestAESGCMInEnvelope(t *testing.T) {
	t.Parallel()
	c, err := codec.AESGCM(key(7))
	require.NoError(t, err)
	w, err := codec.Wrap(c, json.RawMessage(`{"email":"ada@example.com"}`))
	require.NoError(t, err)
	require.NotContains(t, string(w), "ada")
	got, err := codec.Unwrap(c, w)
	require.NoError(t, err)
	require.JSONEq(t, `{"email":"ada@example.com"}`, string(got))
}

// Payloads encrypted once, under key 3 (ID "k1") and key 4 (no ID), for
// the decoding fuzzer: random nonces make every encryption differ, and a
// fuzzer's workers must agree on their seeds.
const (
	sealedK1 = "01026b3194e1393ca989caca4dc1e09b265872514e9fc5168b197f5bddc36d12b5c04e26f02d2d" // {"a":1}
	sealedK4 = "01006e356153de7d34254864a5f89733134cc8bf6da31f37a3e08432eddc70e14d6b04"         // "old"
)

// FuzzAESGCMDecode: decoding arbitrary bytes never panics, and nothing but
// what the keys encrypted decodes.
func FuzzAESGCMDecode(f *testing.F) {
	c, err := codec.AESGCMKeys(codec.Key{ID: "k1", Secret: key(3)}, codec.Key{Secret: key(4)})
	if err != nil {
		f.Fatal(err)
	}
	sealed := map[string]string{}
	for s, plain := range map[string]string{sealedK1: `{"a":1}`, sealedK4: `"old"`} {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		sealed[string(b)] = plain
		f.Add(b)
	}
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 2, 'k', '1'})
	f.Add([]byte{1, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := c.Decode(data)
		if err != nil {
			require.Nil(t, got)
			return
		}
		// Forging a GCM tag is out of reach: only the sealed payloads
		// themselves decode.
		plain, ok := sealed[string(data)]
		require.True(t, ok, "%x decoded to %q", data, got)
		require.Equal(t, plain, string(got))
	})
}

// FuzzAESGCMRoundTrip: whatever is encoded decodes to itself, under each key.
func FuzzAESGCMRoundTrip(f *testing.F) {
	f.Add([]byte(`"hello"`), "v1")
	f.Add([]byte{}, "")
	f.Add([]byte{0, 255, 1}, "a much longer key id with spaces")
	f.Fuzz(func(t *testing.T, p []byte, id string) {
		if len(id) > 255 {
			return
		}
		c, err := codec.AESGCMKeys(codec.Key{ID: id, Secret: key(5)})
		require.NoError(t, err)
		enc, err := c.Encode(p)
		require.NoError(t, err)
		require.Len(t, enc, 2+len(id)+12+len(p)+16)
		got, err := c.Decode(enc)
		require.NoError(t, err)
		require.Equal(t, string(p), string(got))
	})
}

// TestAESGCMKeysRotateFromKeysWithoutID: a codec made with AESGCM (a key
// without an ID) rotates to another key without an ID, and its payloads
// still decode once the old key is given an ID.
func TestAESGCMKeysRotateFromKeysWithoutID(t *testing.T) {
	t.Parallel()
	old, err := codec.AESGCM(key(1))
	require.NoError(t, err)
	encOld, err := old.Encode([]byte(`"old"`))
	require.NoError(t, err)

	rotated, err := codec.AESGCMKeys(codec.Key{Secret: key(2)}, codec.Key{Secret: key(1)})
	require.NoError(t, err, "two keys without an ID are a rotation")
	got, err := rotated.Decode(encOld)
	require.NoError(t, err, "the old key still decodes what it wrote")
	require.Equal(t, `"old"`, string(got))
	encNew, err := rotated.Encode([]byte(`"new"`))
	require.NoError(t, err)
	_, err = old.Decode(encNew)
	require.ErrorContains(t, err, "the key is wrong", "the new key encodes")
	fp1, fp2 := codec.Key{Secret: key(1)}.Fingerprint(), codec.Key{Secret: key(2)}.Fingerprint()
	require.Len(t, fp1, 8)
	require.NotEqual(t, fp1, fp2)
	require.ErrorContains(t, err, `["" (fingerprint `+fp1+`)]`, "the error names the keys it tried")
	newOnly, err := codec.AESGCM(key(2))
	require.NoError(t, err)
	got, err = newOnly.Decode(encNew)
	require.NoError(t, err)
	require.Equal(t, `"new"`, string(got))

	// The old key may be given an ID later: payloads without one are tried
	// with every key.
	named, err := codec.AESGCMKeys(codec.Key{ID: "2025", Secret: key(3)}, codec.Key{ID: "2024", Secret: key(1)})
	require.NoError(t, err)
	got, err = named.Decode(encOld)
	require.NoError(t, err)
	require.Equal(t, `"old"`, string(got))
	_, err = named.Decode(encNew)
	require.ErrorContains(t, err, `the key is wrong or the stored payload was changed (a payload stored without a key ID was tried with every key of this codec: ["2024", "2025"])`)
}
