//go:build unix

package redisvault

import (
	"fmt"
	"testing"
)

// parseMetaCreated reads both metadata forms: "<size> <chars>" (created
// -1) and "<size> <chars> <created>"; what it accepts reads back the same
// when written canonically; anything else is an error, never a panic.
func FuzzParseMetaCreated(f *testing.F) {
	for _, s := range []string{"18002 9000 1767225600000", "18002 9000", "0 0 0", "1 2 ", "1 2 x", "1 2 3 4", "-1 2 3", "1  2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		size, chars, created, err := parseMetaCreated(m)
		if err != nil {
			return
		}
		if size < 0 || chars < 0 {
			t.Fatalf("%q accepted as size %d, chars %d", m, size, chars)
		}
		canon := fmt.Sprintf("%d %d %d", size, chars, created)
		if created == -1 {
			canon = fmt.Sprintf("%d %d", size, chars)
		}
		s2, c2, cr2, err := parseMetaCreated(canon)
		if err != nil || s2 != size || c2 != chars || cr2 != created {
			t.Fatalf("%q: canonical form %q does not read back: %d %d %d %v", m, canon, s2, c2, cr2, err)
		}
	})
}
