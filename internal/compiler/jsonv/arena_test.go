package jsonv

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// testKeep is what the tests' resets keep: a 1 MB body's share.
const testKeep = 1 << 20

// sameIn checks that a parse into a is the parse without it: the same
// tree, or the same error.
func sameIn(t *testing.T, a *Arena, src []byte) *Node {
	t.Helper()
	want, werr := Parse(src, 64)
	got, gerr := ParseIn(a, src, 64, nil)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("ParseIn error %v, Parse error %v", gerr, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseIn tree differs from Parse's for %.80q", src)
	}
	return got
}

// bigObject is an object of n members, each an array of a number and a
// string: a container larger than one chunk when n is.
func bigObject(n int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `` + itoa(i) + `":[` + itoa(i) + `,"v"]`)
	}
	b.WriteString("}")
	return []byte(b.String())
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

// TestArena: trees parsed into one arena are Parse's trees and all stay
// valid until Reset, across failed parses, containers larger than a chunk
// and the chunks reused after Reset.
func TestArena(t *testing.T) {
	docs := [][]byte{
		[]byte(`{"a":[1,"b",null],"c":{"d":true}}`),
		bigObject(600),          // more members than a chunk holds
		[]byte(`[1,2,{"a":`),    // fails mid-container
		[]byte(`{"a":1,"a":2}`), // fails: a duplicate key
		[]byte(`[` + strings.Repeat(`[0,"x"],`, 300) + `1]`), // many nodes, more elements than a chunk
		[]byte(`"\u00e9"`),
	}
	var a Arena
	for round := range 3 {
		var trees []*Node
		for _, d := range docs {
			trees = append(trees, sameIn(t, &a, d))
		}
		// Every tree of the round is intact after the parses that followed it.
		for i, d := range docs {
			if want, _ := Parse(d, 64); !reflect.DeepEqual(trees[i], want) {
				t.Fatalf("round %d: tree %d changed by a later parse into the arena", round, i)
			}
		}
		a.Reset(testKeep)
	}
}

// TestArenaReuses: once an arena has held a request's trees, parsing the
// next into it allocates almost nothing (the parser itself, and the keys
// a request spells, which Reset lets go).
func TestArenaReuses(t *testing.T) {
	src := []byte(`[` + strings.Repeat(`{"role":"tool","content":["x",1,{"type":"text"}]},`, 500) + `null]`)
	var a Arena
	if _, err := ParseIn(&a, src, 64, nil); err != nil {
		t.Fatal(err)
	}
	a.Reset(testKeep)
	heap := testing.AllocsPerRun(20, func() {
		if _, err := Parse(src, 64); err != nil {
			t.Fatal(err)
		}
	})
	reused := testing.AllocsPerRun(20, func() {
		if _, err := ParseIn(&a, src, 64, nil); err != nil {
			t.Fatal(err)
		}
		a.Reset(testKeep)
	})
	if reused > 6 || heap < 50 {
		t.Fatalf("%.0f allocations a parse into a used arena, %.0f into the heap", reused, heap)
	}
}

// TestArenaPoisoned: a tree used after its arena was reset for tests
// fails loudly, and Reset keeps a bounded amount of memory after a body
// of many tiny values.
func TestArenaPoisoned(t *testing.T) {
	var a Arena
	src := []byte(`{"a":"b"}`)
	root, err := ParseIn(&a, src, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	member := root.Members
	a.ResetPoisoned(testKeep)
	for name, read := range map[string]func(){
		"a node":           func() { _ = root.Raw(src) },
		"a member's value": func() { _ = member[0].Value.Raw(src) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s of a reset tree was read without a panic", name)
				}
			}()
			read()
		}()
	}

	// A body of tiny values takes many times its size in nodes: Reset
	// keeps what its owner allows, and a tree in a chunk it let go is
	// poisoned all the same.
	tiny := []byte(`[` + strings.Repeat(`0,`, 200000) + `0]`)
	big, err := ParseIn(&a, tiny, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := a.Bytes(); n < 4<<20 {
		t.Fatalf("the tiny values took %d bytes; the test wants more than the arena keeps", n)
	}
	a.ResetPoisoned(64 << 10)
	if n := a.Bytes(); n > 64<<10 {
		t.Fatalf("Reset kept %d bytes, more than the %d allowed", n, 64<<10)
	}
	for _, e := range big.Elems {
		if e.Kind != poisonKind {
			t.Fatal("a node in a chunk Reset let go was not poisoned")
		}
	}
	sameIn(t, &a, bytes.Repeat([]byte(" "), 3)) // still serves (an error here)
	sameIn(t, &a, []byte(`[{"a":[1,2]},"x"]`))
}

// FuzzParseIn: whatever a client sends, one request after another, the
// trees parsed into one arena are Parse's, the earlier ones stay intact
// through the later parses, and so do those after a Reset.
func FuzzParseIn(f *testing.F) {
	f.Add([]byte(`{"a":[1,"b",null]}`), []byte(`[1,{"a":`))
	f.Add(bigObject(300), []byte(`[[[],[{}]],"x"]`))
	var a Arena
	f.Fuzz(func(t *testing.T, first, next []byte) {
		t1 := sameIn(t, &a, first)
		sameIn(t, &a, next)
		if want, _ := Parse(first, 64); !reflect.DeepEqual(t1, want) {
			t.Fatal("the first tree changed by the next parse into the arena")
		}
		a.Reset(testKeep)
		sameIn(t, &a, next)
		a.Reset(testKeep)
	})
}
