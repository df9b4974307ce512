package postgres

import (
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
)

// A manyStmt does the writes of many runs in one statement. Postgres
// starts, plans and finishes a statement's executor once however many rows
// it touches, and for the step statements, with their many CTEs, that
// fixed cost was about half of each one (a statement per run against one
// for 16 runs, same rows, measured with pgbench: 17,600 against 33,600
// steps a second). The grouper runs the writes of a batch that share a
// manyStmt as one; the single statement stays for writes alone and for the
// write-by-write retry of a failed group.
//
// The statement takes each single argument named in scalars as an array
// with one element per write, in order, and each list (an array argument
// of the single statement, such as a step's events) concatenated over the
// writes, with the owning write's position (1-based, the statement's ix)
// and the element's position in its write's array alongside. It returns
// one row per write, ordered by ix: ix, then the single statement's
// columns. Each write's fences are its own: a write whose fence fails
// changes nothing and returns what its single statement would.
type manyStmt struct {
	sql     string
	scalars []string
	lists   []manyList
}

// manyList is a group of array arguments of equal length per write.
type manyList struct {
	names   []string // the arrays, concatenated
	ix, pos string   // the arguments that carry each element's write and (if set) position
	count   string   // if set, the argument that carries each write's length
}

// elements is the length of a write's arrays.
func (l manyList) elements(args namedArgs) int {
	return reflect.ValueOf(args[l.names[0]]).Len()
}

// args merges the arguments of the writes, in order.
func (m *manyStmt) args(reqs []*groupReq) namedArgs {
	out := make(namedArgs, len(m.scalars)+4*len(m.lists))
	for _, name := range m.scalars {
		v := make([]any, len(reqs))
		for i, r := range reqs {
			v[i] = r.args[name]
		}
		out[name] = v
	}
	for _, l := range m.lists {
		total := 0
		for _, r := range reqs {
			total += l.elements(r.args)
		}
		ix, pos := make([]int64, 0, total), []int64(nil)
		if l.pos != "" {
			pos = make([]int64, 0, total)
		}
		var count []int32
		if l.count != "" {
			count = make([]int32, len(reqs))
		}
		for i, r := range reqs {
			n := l.elements(r.args)
			for p := range n {
				ix = append(ix, int64(i+1))
				if pos != nil {
					pos = append(pos, int64(p+1))
				}
			}
			if count != nil {
				count[i] = int32(n)
			}
		}
		out[l.ix] = ix
		if l.pos != "" {
			out[l.pos] = pos
		}
		if count != nil {
			out[l.count] = count
		}
		for _, name := range l.names {
			var all reflect.Value
			for _, r := range reqs {
				v := reflect.ValueOf(r.args[name])
				if !all.IsValid() {
					all = reflect.MakeSlice(v.Type(), 0, total)
				}
				all = reflect.AppendSlice(all, v)
			}
			out[name] = all.Interface()
		}
	}
	return out
}

// scanEach gives each write its row of the statement's result.
func (m *manyStmt) scanEach(reqs []*groupReq) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		k := 0
		for rows.Next() {
			if k == len(reqs) {
				return fmt.Errorf("postgres store: a statement for %d writes returned more rows", len(reqs))
			}
			if err := reqs[k].scan(ixRow{rows: rows, want: int64(k + 1)}); err != nil {
				return err
			}
			k++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if k != len(reqs) {
			return fmt.Errorf("postgres store: a statement for %d writes returned %d rows", len(reqs), k)
		}
		return nil
	}
}

// ixRow is one write's row of a manyStmt's result, without its ix.
type ixRow struct {
	rows pgx.Rows
	want int64
}

func (r ixRow) Scan(dest ...any) error {
	var ix int64
	if err := r.rows.Scan(append([]any{&ix}, dest...)...); err != nil {
		return err
	}
	if ix != r.want {
		return fmt.Errorf("postgres store: a statement for many writes returned write %d's row where write %d's was due", ix, r.want)
	}
	return nil
}
