package history

import (
	"strings"
	"unicode/utf8"
)

// EscapeText returns s as a history can hold it: PostgreSQL's text and
// jsonb hold only valid UTF-8 without NUL. Each NUL byte, and each byte
// that is not part of valid UTF-8, becomes the four characters \xNN (its
// value in hex: \x00, \xff); everything else stays as it is, so valid text
// without NUL comes back unchanged. Failure messages are recorded escaped,
// so that a failure is recorded whatever its message holds, and replay
// compares them escaped.
func EscapeText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && n == 1) {
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
