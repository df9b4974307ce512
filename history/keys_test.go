package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// strictDecode decodes as Decode did before knownKeys: a json.Decoder that
// disallows unknown fields, and nothing after the value (where the old
// check, dec.More, let a stray '}' or ']' through).
func strictDecode(typ string, b []byte) (Attributes, error) {
	a, err := Decode(typ, []byte("null")) // a zero value of the type
	if err != nil {
		return nil, err
	}
	v := reflect.New(reflect.TypeOf(a))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return nil, err
	}
	if len(bytes.Trim(b[dec.InputOffset():], " \t\r\n")) > 0 { // JSON's spaces

		return nil, errors.New("trailing data")
	}
	return v.Elem().Interface().(Attributes), nil
}

func TestDecodeRefusesUnknownFieldsAsTheStrictDecoder(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ typ, in, unknown string }{
		{"timer_fired", `{"seq":1}`, ""},
		{"timer_fired", `{"SEQ":1}`, ""},
		{"timer_fired", `{"s\u0065q":1}`, ""},
		{"timer_fired", `{"seq":1,"extra":{"seq":[1,"}"]}}`, "extra"},
		{"timer_fired", `null`, ""},
		{"activity_scheduled", `{"seq":1,"activity":"A","queue":"q","input":{"x":"\"}"},"options":{"any":1}}`, ""},
		{"activity_failed", `{"seq":1,"failure":{"message":"m","class":"c"}}`, ""},
		{"activity_failed", `{"seq":1,"failure":{"message":"m","extra":1}}`, "extra"},
		{"workflow_failed", `{"failure":null}`, ""},
		// Past a raw value nested deeply, the keys are still checked.
		{"activity_completed", `{"SEQ":1,"result":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `,"extra":1}`, "extra"},
	} {
		_, strictErr := strictDecode(tt.typ, []byte(tt.in))
		_, err := Decode(tt.typ, []byte(tt.in))
		if tt.unknown == "" {
			require.NoError(t, strictErr, tt.in)
			require.NoError(t, err, tt.in)
		} else {
			require.ErrorContains(t, strictErr, `unknown field "`+tt.unknown+`"`, tt.in)
			require.ErrorContains(t, err, `unknown field "`+tt.unknown+`"`, tt.in)
		}
	}
}

// Decode accepts what the strict decoder accepts, and decodes it alike.
func FuzzDecodeMatchesTheStrictDecoder(f *testing.F) {
	for typ, in := range map[string]string{
		"timer_fired":        `{"seq":1}`,
		"activity_scheduled": `{"seq":1,"activity":"A","queue":"q","input":[1,{"a":"}"}],"options":null}`,
		"activity_failed":    `{"seq":2,"failure":{"message":"m","Class":"c","attempts":3}}`,
		"workflow_started":   `{"workflow_type":"W","workflow_id":"w","queue":"q","input":"x","attempt":1}`,
	} {
		f.Add(typ, []byte(in))
	}
	// Shapes that the scanner of scan.go decodes itself or gives up on: the
	// spacing Postgres prints jsonb with, escapes, bytes past ASCII, nulls,
	// keys named twice, numbers that are no integers, deep raw values.
	for _, tt := range []struct{ typ, in string }{
		{"activity_scheduled", `{"seq": 1, "input": {"a": [1, 2.5e-3, true, null]}, "queue": "q", "options": {"name": "N"}, "activity": "A"}`},
		{"activity_completed", `{"seq":1,"result":null,"attempt":2,"seq":3}`},
		{"activity_failed", `{"seq":1,"failure":{"message":"a\u00e9\n"},"failure":{"class":"c"}}`},
		{"signal_received", "{\"name\":\"caf\xc3\xa9\xff\",\"payload\":\"\\ud800\"}"},
		{"timer_started", `{"seq":-0,"fire_at":"2030-01-01T00:00:00.5+01:00"}`},
		{"timer_started", `{"seq":1e2,"fire_at":null}`},
		{"timer_fired", `{"seq":9223372036854775808}`},
		{"version_marker", `{"change_id":"c","version":01}`},
		{"workflow_completed", `{"result":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`},
		{"workflow_started", ` {"workflow_type":"W","Queue":"q","input":1} `},
	} {
		f.Add(tt.typ, []byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, typ string, b []byte) {
		if _, ok := decoders[typ]; !ok {
			return
		}
		want, wantErr := strictDecode(typ, b)
		got, err := Decode(typ, b)
		if wantErr != nil {
			require.Error(t, err, "the strict decoder refused it: %v", wantErr)
			return
		}
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}
