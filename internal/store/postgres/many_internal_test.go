package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Merged arguments pair each element with its write; arguments that cannot
// be merged that way are refused, and the writes go one by one.
func TestManyArgs(t *testing.T) {
	t.Parallel()
	m := &manyStmt{scalars: []string{"run_id"}, lists: []manyList{{names: []string{"types", "attrs"}, ix: "ev_ix", pos: "ev_pos", count: "n"}}}
	req := func(runID string, types, attrs any) *groupReq {
		return &groupReq{args: namedArgs{"run_id": runID, "types": types, "attrs": attrs}}
	}
	args, err := m.args([]*groupReq{
		req("a", []string{"x", "y"}, []string{"1", "2"}),
		req("b", []string{}, []string{}),
		req("c", []string{"z"}, []string{"3"}),
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, args["run_id"], "typed when all are of one type")
	require.Equal(t, []string{"x", "y", "z"}, args["types"])
	require.Equal(t, []string{"1", "2", "3"}, args["attrs"])
	require.Equal(t, []int64{1, 1, 3}, args["ev_ix"])
	require.Equal(t, []int64{1, 2, 1}, args["ev_pos"])
	require.Equal(t, []int32{2, 0, 1}, args["n"])

	mixed, err := m.args([]*groupReq{req("a", []string{}, []string{}), {args: namedArgs{"run_id": nil, "types": []string{}, "attrs": []string{}}}})
	require.NoError(t, err)
	require.Equal(t, []any{"a", nil}, mixed["run_id"], "a NULL among them: as they are")

	for name, reqs := range map[string][]*groupReq{
		"lengths differ":     {req("a", []string{"x"}, []string{}), req("b", []string{}, []string{})},
		"not a slice":        {req("a", nil, []string{}), req("b", []string{}, []string{})},
		"types differ":       {req("a", []string{}, []string{}), req("b", []any{}, []string{})},
		"other types differ": {req("a", []any{}, []string{}), req("b", []string{}, []string{})},
	} {
		_, err := m.args(reqs)
		require.Error(t, err, name)
	}
}
