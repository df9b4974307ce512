package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNamedArgsRewriteOnce(t *testing.T) {
	t.Parallel()
	const sql = `-- a comment with @not_a_param
SELECT @b::text, '@not_either', @a, @b, "@quoted"` // @b twice: one $n
	got, args, err := namedArgs{"a": 1, "b": "x"}.RewriteQuery(t.Context(), nil, sql, nil)
	require.NoError(t, err)
	require.Equal(t, `-- a comment with @not_a_param
SELECT $1::text, '@not_either', $2, $1, "@quoted"`, got)
	require.Equal(t, []any{"x", 1}, args)

	again, args, err := namedArgs{"a": 2, "b": "y"}.RewriteQuery(t.Context(), nil, sql, nil)
	require.NoError(t, err)
	require.Equal(t, got, again)
	require.Equal(t, []any{"y", 2}, args, "the cached rewrite takes this call's values")

	_, _, err = namedArgs{"a": 1}.RewriteQuery(t.Context(), nil, sql, nil)
	require.ErrorContains(t, err, "@b not given")
}
