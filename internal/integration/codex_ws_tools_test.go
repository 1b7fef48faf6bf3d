package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// checkCodexWSTools checks, at the provider, that every continuation
// (previous_response_id) carries the same tools array as the message it
// continues on its socket: the provider renders tools first, so a tools
// array that changes along a chain makes it read the chain's whole held
// history again uncached. A warm-up (generate:false) is left out of the
// comparison when a message continues it: it carries no output to cache
// past the prefix it shares. It logs each socket's chain as a line of
// marks: O an opening, C a continuation, W a warm-up; + carries the
// gateway's tool.
func checkCodexWSTools(t *testing.T, got codexWSRun) {
	t.Helper()
	type create struct {
		Prev     string          `json:"previous_response_id"`
		Generate *bool           `json:"generate"`
		Tools    json.RawMessage `json:"tools"`
	}
	last := map[int]create{}
	chains := map[int]string{}
	var diffs []string
	for _, m := range got.ws.messages() {
		if !m.Create {
			continue
		}
		var c create
		if json.Unmarshal(m.Body, &c) != nil {
			continue
		}
		mark := "O"
		switch {
		case c.Generate != nil && !*c.Generate:
			mark = "W"
		case c.Prev != "":
			mark = "C"
		}
		if bytes.Contains(c.Tools, []byte(`"token_terminator"`)) {
			mark += "+"
		}
		chains[m.Socket] += mark + " "
		prev, ok := last[m.Socket]
		warm := prev.Generate != nil && !*prev.Generate
		if c.Prev != "" && ok && !warm && !bytes.Equal(prev.Tools, c.Tools) {
			diffs = append(diffs, fmt.Sprintf("socket %d: a continuation's tools (%d bytes) differ from its chain's (%d bytes)", m.Socket, len(c.Tools), len(prev.Tools)))
		}
		last[m.Socket] = c
	}
	for s := 1; s <= len(chains); s++ {
		t.Logf("socket %d: %s", s, chains[s])
	}
	for _, d := range diffs {
		t.Error(d)
	}
}
