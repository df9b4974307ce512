package codec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/codec"
)

// reverse is a codec for tests: it reverses the bytes, and fails to encode
// or decode anything that contains "fail".
type reverse struct{}

func (reverse) Encode(p []byte) ([]byte, error) {
	if strings.Contains(string(p), "fail") {
		return nil, errors.New("refused")
	}
	out := make([]byte, len(p))
	for i, c := range p {
		out[len(p)-1-i] = c
	}
	return out, nil
}

func (r reverse) Decode(p []byte) ([]byte, error) {
	if strings.Contains(string(p), "liaf") {
		return nil, errors.New("refused")
	}
	return r.Encode(p)
}

func TestWrapUnwrapRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range []string{`"hello"`, `{"a":[1,2,3]}`, `null`, `12.5`, `{"durable_codec":"AAAA"}`} {
		w, err := codec.Wrap(reverse{}, json.RawMessage(p))
		require.NoError(t, err)
		require.True(t, json.Valid(w), "an envelope is JSON: %s", w)
		require.True(t, codec.IsWrapped(w))
		require.NotContains(t, string(w), p, "the payload is encoded")
		got, err := codec.Unwrap(reverse{}, w)
		require.NoError(t, err)
		require.Equal(t, p, string(got))
	}
}

func TestWrapLeavesEmptyAndNil(t *testing.T) {
	t.Parallel()
	w, err := codec.Wrap(reverse{}, nil)
	require.NoError(t, err)
	require.Nil(t, w, "nothing to encode")
	w, err = codec.Wrap(nil, json.RawMessage(`"x"`))
	require.NoError(t, err)
	require.JSONEq(t, `"x"`, string(w), "no codec: stored as it is")
}

func TestUnwrapRecognisesOnlyEnvelopes(t *testing.T) {
	t.Parallel()
	// "ImEi" is base64 of "a" reversed: `"a"`.
	for _, tt := range []struct {
		name, in string
		envelope bool
	}{
		{"compact", `{"durable_codec":"ImEi"}`, true},
		{"jsonb spacing", `{"durable_codec": "ImEi"}`, true},
		{"any whitespace", " \n{ \"durable_codec\"\t:\r\"ImEi\" } \n", true},
		{"plain object", `{"email":"ada@example.com"}`, false},
		{"plain string", `"durable_codec"`, false},
		{"another field too", `{"durable_codec":"ImEi","x":1}`, false},
		{"field after", `{"x":1,"durable_codec":"ImEi"}`, false},
		{"not a string", `{"durable_codec":5}`, false},
		{"escaped", `{"durable_codec":"Im\u0045i"}`, false},
		{"trailing data", `{"durable_codec":"ImEi"}x`, false},
		{"unterminated", `{"durable_codec":"ImEi`, false},
		{"no close", `{"durable_codec":"ImEi"`, false},
		{"empty", ``, false},
		{"null", `null`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.envelope, codec.IsWrapped(json.RawMessage(tt.in)))
			got, err := codec.Unwrap(reverse{}, json.RawMessage(tt.in))
			require.NoError(t, err)
			if tt.envelope {
				require.Equal(t, `"a"`, string(got))
			} else {
				require.Equal(t, tt.in, string(got), "a plain payload is left alone")
			}
		})
	}
}

func TestUnwrapErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		c     codec.PayloadCodec
		in    string
		want  string
		isErr error
	}{
		{"no codec", nil, `{"durable_codec":"ImEi"}`, "set engine.Options.Codec", codec.ErrNoCodec},
		{"bad base64", reverse{}, `{"durable_codec":"ImE"}`, "corrupt durable_codec envelope", nil},
		{"codec refuses", reverse{}, `{"durable_codec":"ImxpYWYi"}`, "decode payload: refused", nil},
		{"not JSON", reverse{}, `{"durable_codec":"YWJj"}`, "not JSON", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := codec.Unwrap(tt.c, json.RawMessage(tt.in))
			require.ErrorContains(t, err, tt.want)
			if tt.isErr != nil {
				require.ErrorIs(t, err, tt.isErr)
			}
		})
	}
}

func TestWrapEncodeError(t *testing.T) {
	t.Parallel()
	_, err := codec.Wrap(reverse{}, json.RawMessage(`"fail"`))
	require.ErrorContains(t, err, "encode payload: refused")
}

// FuzzUnwrap: the envelope parser never panics; what is not an envelope
// comes back unchanged; an envelope is JSON.
func FuzzUnwrap(f *testing.F) {
	for _, s := range []string{`{"durable_codec":"ImEi"}`, `{"durable_codec": "ImEi"}`, `{"email":"x"}`, `"x"`, `{"durable_codec":"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := codec.Unwrap(reverse{}, data)
		if !codec.IsWrapped(data) {
			require.NoError(t, err)
			require.Equal(t, string(data), string(got))
			return
		}
		require.True(t, json.Valid(data), "an envelope is JSON: %q", data)
		if err == nil {
			require.True(t, json.Valid(got), "what decodes is JSON")
		}
	})
}

// FuzzWrap: any JSON payload wraps into an envelope and unwraps to itself.
func FuzzWrap(f *testing.F) {
	for _, s := range []string{`"hello"`, `{"a":[1,2,{"b":null}]}`, `{"durable_codec":"ImEi"}`, `-1.5e10`, `"\u00e9\ud83d\ude00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if !json.Valid(p) || strings.Contains(string(p), "fail") || strings.Contains(string(p), "liaf") {
			return
		}
		w, err := codec.Wrap(reverse{}, p)
		require.NoError(t, err)
		require.True(t, codec.IsWrapped(w))
		require.True(t, json.Valid(w))
		got, err := codec.Unwrap(reverse{}, w)
		require.NoError(t, err)
		require.Equal(t, string(p), string(got))
	})
}
