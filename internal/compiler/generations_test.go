package compiler

import "testing"

// A full generation becomes the previous one; an entry read from it moves
// back; the generation before it is dropped; update stores only when asked.
func TestGenerations(t *testing.T) {
	g := newGenerations[int, string](2)
	g.put(1, "a")
	g.put(2, "b")
	g.put(3, "c") // rotates: prev {1,2}, cur {3}
	if v, ok := g.get(1); !ok || v != "a" {
		t.Fatalf("an entry of the previous generation is lost: %q %v", v, ok)
	}
	// 1 moved back: cur {3,1}. The next put rotates again: prev {3,1}, cur {4}; 2 is gone.
	g.put(4, "d")
	if _, ok := g.get(2); ok {
		t.Fatal("an entry two generations old survived")
	}
	for k, want := range map[int]string{1: "a", 3: "c", 4: "d"} {
		if v, ok := g.get(k); !ok || v != want {
			t.Fatalf("get(%d) = %q %v, want %q", k, v, ok, want)
		}
	}
	g.update(4, func(old string) (string, bool) { return old + "!", true })
	g.update(5, func(old string) (string, bool) { return "new", old != "" })
	if v, _ := g.get(4); v != "d!" {
		t.Fatalf("update stored %q", v)
	}
	if _, ok := g.get(5); ok {
		t.Fatal("update stored what it was told not to")
	}
}
