package recovery

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// The fuzz targets feed provider answers and client requests of any shape
// to the pieces that parse them: they must never panic, and what they
// return must be valid JSON without our calls.

func FuzzFollowUp(f *testing.F) {
	for i, format := range allFormats {
		f.Add(uint8(i), requests[format], answers[format](true, ""))
		f.Add(uint8(i), requests[format], answers[format](false, ""))
	}
	f.Add(uint8(1), `{"input":"hi"}`, responsesAnswer(false, ""))
	f.Fuzz(func(t *testing.T, sel uint8, request, answer string) {
		format := allFormats[int(sel)%3]
		calls := []Call{{ID: "own1", Result: []byte(`{"content":"x"}`)}}
		r := response.NewReader(format, response.Options{Keep: []string{ToolName}})
		r.Write([]byte(answer))
		for _, c := range OwnCalls(r.ToolCalls()) {
			calls = append(calls, Call{ID: c.ID, Result: []byte(`{}`)})
		}
		out, err := FollowUp(format, []byte(request), []byte(answer), calls)
		if err != nil {
			if out != nil {
				t.Fatal("an error comes with no output")
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("follow-up is not valid JSON:\n%s", out)
		}
	})
}

func FuzzStripOwnCalls(f *testing.F) {
	for i, format := range allFormats {
		f.Add(uint8(i), answers[format](true, ""))
		f.Add(uint8(i), answers[format](false, ""))
		f.Add(uint8(i), answers[format](false, "done"))
	}
	f.Fuzz(func(t *testing.T, sel uint8, answer string) {
		format := allFormats[int(sel)%3]
		out, err := StripOwnCalls(format, []byte(answer), provider.Usage{Input: 9, Output: 8, CacheRead: 7, Known: true})
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("not valid JSON:\n%s", out)
		}
		r := response.NewReader(format, response.Options{})
		r.Write(out)
		if len(OwnCalls(r.ToolCalls())) != 0 {
			t.Fatalf("our call left in:\n%s", out)
		}
	})
}

func FuzzStitcher(f *testing.F) {
	for i, format := range allFormats {
		for _, rounds := range []int{0, 1} {
			turn, _ := recoverytest.Model{Format: format, ID: "a_x", Rounds: rounds, Mixed: true}.Answer([]byte(requests[format][:len(requests[format])-1] + `,"tools":[` + string(Definition(format)) + `]}`))
			f.Add(uint8(i), turn.Stream(format, 0), uint16(100))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, stream []byte, cut uint16) {
		format := allFormats[int(sel)%3]
		var client bytes.Buffer
		st, err := NewStitcher(format, &client, Config{MaxRounds: 1})
		if err != nil {
			t.Fatal(err)
		}
		at := int(cut) % (len(stream) + 1)
		st.Write(stream[:at])
		st.Write(stream[at:])
		r, err := st.EndRound()
		if err == nil && r.Continue {
			// A second round: the same stream again.
			st.Write(stream)
			st.EndRound()
		}
		st.Close()
		rd := response.NewReader(format, response.Options{Stream: true})
		rd.Write(client.Bytes())
		if len(OwnCalls(rd.ToolCalls())) != 0 {
			t.Fatalf("our call reached the client:\n%s", client.Bytes())
		}
	})
}
