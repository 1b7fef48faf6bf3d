package response

import (
	"reflect"
	"strings"
	"testing"
)

type gotEvent struct{ Name, Data, Raw string }

func scan(max int, chunks ...string) (evs []gotEvent, oversize int) {
	e := &Events{Max: max,
		OnEvent:    func(ev Event) { evs = append(evs, gotEvent{ev.Name, string(ev.Data), string(ev.Raw)}) },
		OnOversize: func() { oversize++ },
	}
	for _, c := range chunks {
		e.Write([]byte(c))
	}
	e.Flush()
	return evs, oversize
}

func TestEvents(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		max      int
		want     []gotEvent
		oversize int
	}{
		{"lf", "event: a\ndata: 1\n\ndata: 2\n\n", 0,
			[]gotEvent{{"a", "1", "event: a\ndata: 1\n\n"}, {"", "2", "data: 2\n\n"}}, 0},
		{"crlf", "event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n", 0,
			[]gotEvent{{"a", "1", "event: a\r\ndata: 1\r\n\r\n"}, {"", "2", "data: 2\r\n\r\n"}}, 0},
		{"cr", "event: a\rdata: 1\r\rdata: 2\r\r", 0,
			[]gotEvent{{"a", "1", "event: a\rdata: 1\r\r"}, {"", "2", "data: 2\r\r"}}, 0},
		{"multi-line data, no space, empty line", "data:x\ndata\ndata: y\n\n", 0,
			[]gotEvent{{"", "x\n\ny", "data:x\ndata\ndata: y\n\n"}}, 0},
		{"comments pass as events without data", ": ping\n\nevent: b\n: note\ndata: {}\n\n", 0,
			[]gotEvent{{"", "", ": ping\n\n"}, {"b", "{}", "event: b\n: note\ndata: {}\n\n"}}, 0},
		{"only the first space is stripped", "data:  two\n\n", 0,
			[]gotEvent{{"", " two", "data:  two\n\n"}}, 0},
		{"unterminated last event is flushed", "data: 1\n\ndata: 2", 0,
			[]gotEvent{{"", "1", "data: 1\n\n"}, {"", "2", "data: 2"}}, 0},
		{"oversize event skipped, next kept", "data: " + strings.Repeat("x", 50) + "\n\ndata: ok\n\n", 20,
			[]gotEvent{{"", "ok", "data: ok\n\n"}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check := func(how string, chunks ...string) {
				got, over := scan(c.max, chunks...)
				if !reflect.DeepEqual(got, c.want) || over != c.oversize {
					t.Fatalf("%s: got %q (oversize %d), want %q (%d)", how, got, over, c.want, c.oversize)
				}
			}
			check("whole", c.in)
			for i := 1; i < len(c.in); i++ {
				check("split", c.in[:i], c.in[i:])
			}
			var bytewise []string
			for i := range c.in {
				bytewise = append(bytewise, c.in[i:i+1])
			}
			check("bytes", bytewise...)
		})
	}
}

// TestEventsRawConcatenates: forwarding every event's Raw reproduces the
// stream exactly, which is what lets the recovery stitcher pass events on
// untouched.
func TestEventsRawConcatenates(t *testing.T) {
	for _, in := range []string{anthropicStreamFixture, responsesStreamFixture, chatStreamFixture, "\n\n: x\r\n\rdata: 1\r\n\r\n"} {
		for i := 0; i < len(in); i += 7 {
			var out strings.Builder
			e := &Events{OnEvent: func(ev Event) { out.Write(ev.Raw) }}
			e.Write([]byte(in[:i]))
			e.Write([]byte(in[i:]))
			e.Flush()
			if out.String() != in {
				t.Fatalf("split %d: raw events do not reassemble the stream", i)
			}
		}
	}
}

func FuzzEvents(f *testing.F) {
	f.Add(anthropicStreamFixture, uint16(10))
	f.Add("data: a\r\r\ndata: b\r\n", uint16(3))
	f.Fuzz(func(t *testing.T, in string, cut uint16) {
		at := int(cut) % (len(in) + 1)
		whole, _ := scan(64, in)
		split, _ := scan(64, in[:at], in[at:])
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("split at %d: %q vs %q", at, split, whole)
		}
		var raw strings.Builder
		for _, ev := range whole {
			raw.WriteString(ev.Raw)
		}
		if len(in) < 64 && raw.String() != in {
			t.Fatalf("raw %q does not reassemble %q", raw.String(), in)
		}
	})
}

func TestEventsReset(t *testing.T) {
	var got []gotEvent
	e := &Events{OnEvent: func(ev Event) { got = append(got, gotEvent{ev.Name, string(ev.Data), string(ev.Raw)}) }}
	e.Write([]byte("data: 1\n\ndata: cut"))
	e.Reset()
	e.Write([]byte("data: 2\n\n"))
	want := []gotEvent{{"", "1", "data: 1\n\n"}, {"", "2", "data: 2\n\n"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q", got)
	}
}
