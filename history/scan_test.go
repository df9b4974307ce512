package history

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorded returns the histories under testdata/histories, with the bytes
// of their files.
func recorded(t testing.TB) map[string][]byte {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string][]byte{}
	for _, name := range files {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		out[filepath.Base(name)] = data
	}
	return out
}

// jsonbSpacing spaces JSON as Postgres prints a jsonb value: a space after
// each colon and comma (none inside strings, which these samples do not
// need).
func jsonbSpacing(b []byte) []byte {
	s := strings.ReplaceAll(string(b), `":`, `": `)
	return []byte(strings.ReplaceAll(s, `,"`, `, "`))
}

// The scanner, not its fallback, decodes what the engine writes: every
// event of the recorded histories as Encode writes it and as Postgres
// prints it back, and the exported files themselves.
func TestScannerDecodesWhatTheEngineWrites(t *testing.T) {
	t.Parallel()
	n := 0
	for name, data := range recorded(t) {
		h, ok := scanHistory(data)
		require.True(t, ok, "%s: the scanner gave up on an exported file", name)
		want, err := readStream(data)
		require.NoError(t, err)
		require.Equal(t, want, h, name)
		for _, e := range h.Events {
			b, err := Encode(e.Attributes)
			require.NoError(t, err)
			for _, in := range [][]byte{b, jsonbSpacing(b)} {
				v, want := reflect.New(reflect.TypeOf(e.Attributes)), reflect.New(reflect.TypeOf(e.Attributes))
				require.True(t, decodeFast(in, jsonFields(v.Elem().Type()), v.Elem()), "%s: the scanner gave up on %s", name, in)
				require.NoError(t, json.Unmarshal(in, want.Interface()))
				require.Equal(t, want.Elem().Interface(), v.Elem().Interface(), "%s", in)
				n++
			}
		}
	}
	require.Greater(t, n, 50, "the recorded histories have events of many kinds")
}

// Import's scanner accepts a history only where the json.Decoder it falls
// back on reads the same one.
func FuzzImportMatchesTheStream(f *testing.F) {
	for _, data := range recorded(f) {
		f.Add(data)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, recorded(f)["ordersaga-shipped.json"]); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"version":1,"events":[{"attributes":{"seq":1},"id":1,"type":"timer_fired"}],"run_id":"r"}`))
	f.Add([]byte(`{"version":1,"run_id":"r","run_id":"s","events":[]}`))
	f.Add([]byte(`{"version":1,"events":[{"id":1,"time":"2030-01-01T00:00:00Z","type":"nope","attributes":{}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanHistory(data)
		if !ok {
			return
		}
		want, err := readStream(data)
		require.NoError(t, err, "the scanner read a history that the stream refuses")
		require.Equal(t, want, got)
	})
}
