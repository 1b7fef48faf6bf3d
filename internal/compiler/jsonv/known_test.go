package jsonv

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// exactKnown is a Known that keeps the bytes of every string it was told
// about and answers only for bytes equal to one of them (the contract).
type exactKnown struct {
	strs [][]byte
	hits int
}

func (k *exactKnown) String(src []byte, start int) (int, bool, bool, bool) {
	for _, s := range k.strs {
		if bytes.HasPrefix(src[start:], s) {
			k.hits++
			// The flags are recomputed the way Parse would, from the bytes.
			esc, ascii := bytes.IndexByte(s, '\\') >= 0, isASCII(s)
			return start + len(s), esc, ascii, true
		}
	}
	return 0, false, false, false
}

func (k *exactKnown) Scanned(src []byte, start, end int, escaped, ascii bool) {
	if end-start < KnownMin {
		panic("Scanned a short string")
	}
	if esc, a := bytes.IndexByte(src[start:end], '\\') >= 0, isASCII(src[start:end]); esc != escaped || a != ascii {
		panic("Scanned with wrong flags")
	}
	k.strs = append(k.strs, bytes.Clone(src[start:end]))
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// sameParse checks that ParseKnown returns what Parse returns: the same
// tree, or the same error at the same offset.
func sameParse(t *testing.T, src []byte, k Known) {
	t.Helper()
	want, werr := Parse(src, 64)
	got, gerr := ParseKnown(src, 64, k)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("ParseKnown error %v, Parse error %v", gerr, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseKnown tree differs from Parse's")
	}
}

// TestParseKnown parses a first body (the Known learns its long strings),
// then a second one, and checks both against Parse: the second resends,
// changes or breaks the long string right at and after the KnownMin bytes
// the parser looks at first.
func TestParseKnown(t *testing.T) {
	long := strings.Repeat("a", KnownMin) // with its quotes, past KnownMin
	tests := []struct {
		name        string
		first, next string
		hits        int
	}{
		{"resent", `["` + long + `tail",1]`, `["` + long + `tail",1,"new"]`, 1},
		{"resent twice in one body", `{"a":"` + long + `x"}`, `{"a":"` + long + `x","b":["` + long + `x"]}`, 2},
		{"same start, longer", `["` + long + `x"]`, `["` + long + `xy"]`, 0},
		{"same start and length, other bytes", `["` + long + `xy"]`, `["` + long + `xz"]`, 0},
		{"same start, other tenant's end is past the body", `["` + long + `xyz"]`, `["` + long + `x`, 0},
		{"escape across the first look", `["` + long[:KnownMin-4] + `\u00e9\n\"` + `"]`, `["` + long[:KnownMin-4] + `\u00e9\n\"` + `"]`, 1},
		{"two-byte character across the first look", `["` + long[:KnownMin-2] + "é" + `"]`, `["` + long[:KnownMin-2] + "é" + `"]`, 1},
		{"invalid UTF-8 after the first look", `["` + long + "\xff" + `"]`, `["` + long + "\xff" + `"]`, 0},
		{"control character after the first look", `["` + long + "\x01" + `"]`, `["` + long + `"]`, 0},
		{"bad escape after the first look", `["` + long + `\q"]`, `["` + long + `\q"]`, 0},
		{"unterminated", `["` + long, `["` + long, 0},
		{"ends inside the first look", `["` + long[:KnownMin-3] + `"]`, `["` + long[:KnownMin-3] + `"]`, 0},
		{"escaped quotes inside the first look", `["\"` + long + `\""]`, `["\"` + long + `\""]`, 1},
		{"escaped backslash, then the end inside the first look", `["` + long[:10] + `\\","` + long + `"]`, `["` + long[:10] + `\\","` + long + `"]`, 1},
		{"escaped backslash and quote inside the first look", `["` + long[:10] + `\\\"` + long + `"]`, `["` + long[:10] + `\\\"` + long + `"]`, 1},
		{"long key", `{"` + long + `":1}`, `{"` + long + `":2}`, 1},
		{"duplicate long key still refused", `{"` + long + `":1}`, `{"` + long + `":1,"` + long + `":2}`, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := &exactKnown{}
			sameParse(t, []byte(tc.first), k)
			k.hits = 0
			sameParse(t, []byte(tc.next), k)
			if k.hits != tc.hits {
				t.Fatalf("%d known strings skipped, want %d", k.hits, tc.hits)
			}
		})
	}
}

// FuzzParseKnown: whatever two bodies a client sends one after the other,
// the second parse with the first one's long strings known equals Parse.
// A '~' in the input stands for 600 bytes, so the fuzzer can make long
// strings.
func FuzzParseKnown(f *testing.F) {
	f.Add([]byte(`["~~x",1]`), []byte(`["~~x",1,"~~y"]`))
	f.Add([]byte(`{"a":"~~\u00e9"}`), []byte(`{"a":"~~\u00e9","b":"~~"}`))
	f.Add([]byte(`["~~\n"]`), []byte(`["~~\n\x01"]`))
	f.Add([]byte(`["\"~\\\"~\\","~"]`), []byte(`["\"~\\\"~\\","~","\\"]`))
	expand := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("~"), bytes.Repeat([]byte("é\\n"), 150)) }
	f.Fuzz(func(t *testing.T, first, next []byte) {
		k := &exactKnown{}
		sameParse(t, expand(first), k)
		sameParse(t, expand(next), k)
	})
}
