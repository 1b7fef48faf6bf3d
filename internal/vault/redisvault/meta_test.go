//go:build unix

package redisvault

import (
	"fmt"
	"testing"
)

// parseMeta reads what the write script stores ("<size> <chars>"): what it
// accepts is two non-negative numbers that read back the same when written
// canonically; anything else is an error, never a panic.
func FuzzParseMeta(f *testing.F) {
	for _, s := range []string{"18002 9000", "0 0", "", " ", "1", "1 ", "x y", "-1 2", "1 -2", "+3 4", "99999999999999999999 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, m string) {
		size, chars, err := parseMeta(m)
		if err != nil {
			return
		}
		if size < 0 || chars < 0 {
			t.Fatalf("%q accepted as size %d, chars %d", m, size, chars)
		}
		s2, c2, err := parseMeta(fmt.Sprintf("%d %d", size, chars))
		if err != nil || s2 != size || c2 != chars {
			t.Fatalf("%q: canonical form does not read back: %d %d %v", m, s2, c2, err)
		}
	})
}
