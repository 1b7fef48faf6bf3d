package cost

import (
	"bytes"
	"encoding/json"
	"regexp"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Rendered is a request's prompt in the provider's render order: the bytes
// the provider's cache is keyed by, and the end offsets of the segments
// that carry a cache_control breakpoint.
type Rendered struct {
	Bytes       []byte
	Breakpoints []int // ascending offsets into Bytes
	OneHour     bool  // a breakpoint asks for the 1-hour TTL
}

var (
	cacheControl       = []byte(`"cache_control"`)
	cacheControlMember = regexp.MustCompile(`"cache_control"\s*:\s*\{[^{}]*\}\s*,|,?\s*"cache_control"\s*:\s*\{[^{}]*\}`)
)

// Render lays out a request body of a compiler format the way its provider
// renders the prompt: tools, then system (Anthropic system, Responses
// instructions), then the messages or input items, each as its exact JSON
// bytes. A segment (the tools, the system, one message) containing a
// cache_control marker ends at a breakpoint: the marker sits on a block of
// that segment, so this places breakpoints at message granularity. The
// markers themselves are left out of the bytes (they key nothing). A body
// that is not a JSON object renders as itself.
func Render(format provider.Format, body []byte) Rendered {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return Rendered{Bytes: body}
	}
	var r Rendered
	add := func(seg []byte) {
		if len(seg) == 0 || bytes.Equal(seg, []byte("null")) {
			return
		}
		marked := bytes.Contains(seg, cacheControl)
		if marked {
			if bytes.Contains(seg, []byte(`"1h"`)) {
				r.OneHour = true
			}
			// The marker is not part of the cached content: clients move
			// it to the newest message on every request.
			seg = cacheControlMember.ReplaceAll(seg, nil)
		}
		r.Bytes = append(r.Bytes, seg...)
		if marked {
			r.Breakpoints = append(r.Breakpoints, len(r.Bytes))
		}
	}
	list := "messages"
	system := "system"
	switch format {
	case provider.Responses:
		list, system = "input", "instructions"
	case "gemini":
		list, system = "contents", "systemInstruction"
	}
	add(top["tools"])
	add(top[system])
	var items []json.RawMessage
	if json.Unmarshal(top[list], &items) == nil {
		for _, it := range items {
			add(it)
		}
	} else {
		add(top[list])
	}
	return r
}
