package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// These tests drive the pure pieces the way the gateway's loop does (see
// doc.go), against a scripted model behind a fake provider that refuses
// (as the real ones do, with a 400) any request breaking the tool-call
// rules.

const loopTenant = "tenant:loop"

var loopText = "The quick brown fox jumps over the lazy dog. 0123456789 ÄÖÜ 🙂 end."

type loopCase struct {
	format provider.Format
	rounds int // pages the model asks for (0: it never calls our tool); above MaxRounds the limit applies
	mixed  bool
}

func loopCases(formats ...provider.Format) []loopCase {
	var out []loopCase
	for _, f := range formats {
		for _, rounds := range []int{0, 1, 2, 3, 4} {
			for _, mixed := range []bool{false, true} {
				out = append(out, loopCase{f, rounds, mixed})
			}
		}
	}
	return out
}

func (c loopCase) String() string {
	return fmt.Sprintf("%s/rounds=%d/mixed=%v", c.format, c.rounds, c.mixed)
}

// expect returns what the client must end up with: the texts of every
// round, the summed usage, and the client calls of the final answer.
func (c loopCase) expect(cfg Config, m recoverytest.Model) (texts []string, usage provider.Usage, clientCalls []string) {
	last := min(c.rounds, cfg.WithDefaults().MaxRounds)
	for k := 0; k <= last; k++ {
		u := provider.Usage{Input: 1000 + 100*k, CacheRead: 500, Output: 20 + k, Known: true}
		if c.format == provider.Anthropic {
			u.CacheWrite = 10
			u.Input += 10
		}
		usage = usage.Add(u)
		if k < c.rounds {
			texts = append(texts, fmt.Sprintf("Looking (%d).", k))
		}
	}
	if c.rounds <= last {
		texts = append(texts, "recovered: "+string([]rune(loopText)[:min(10*c.rounds, len([]rune(loopText)))]))
	}
	if c.mixed {
		clientCalls = []string{fmt.Sprintf("client_%d", last)}
	}
	return texts, usage, clientCalls
}

func setupLoop(t *testing.T, c loopCase) (*memArtifacts, recoverytest.Model, []byte) {
	mem := newMem()
	a := mem.put(t, loopTenant, "bash", loopText)
	body, err := AppendTool(c.format, []byte(requests[c.format]))
	if err != nil {
		t.Fatal(err)
	}
	return mem, recoverytest.Model{Format: c.format, ID: artifact.ID(a.Digest), Rounds: c.rounds, Mixed: c.mixed}, body
}

// TestLoopJSON: non-streaming answers, every format.
func TestLoopJSON(t *testing.T) {
	ctx := context.Background()
	cfg := Config{}
	for _, c := range loopCases(allFormats...) {
		t.Run(c.String(), func(t *testing.T) {
			mem, model, body := setupLoop(t, c)
			var usage provider.Usage
			var final []byte
			for round := 0; ; round++ {
				turn, err := model.Answer(body)
				if err != nil {
					t.Fatalf("round %d: provider refused the request: %v\n%s", round, err, body)
				}
				ans := turn.Body(c.format, round)
				r := response.NewReader(c.format, response.Options{Keep: []string{ToolName}})
				r.Write(ans)
				usage = usage.Add(r.Usage())
				calls := OwnCalls(r.ToolCalls())
				if len(calls) == 0 || round == cfg.WithDefaults().MaxRounds {
					if final, err = StripOwnCalls(c.format, ans, usage); err != nil {
						t.Fatal(err)
					}
					break
				}
				Run(ctx, cfg, mem, loopTenant, calls)
				if body, err = FollowUp(c.format, body, ans, calls); err != nil {
					t.Fatal(err)
				}
			}
			texts, wantUsage, wantCalls := c.expect(cfg, model)
			r := response.NewReader(c.format, response.Options{})
			r.Write(final)
			if u := sums(r.Usage()); u != openAIUsage(c.format, wantUsage) {
				t.Fatalf("usage %+v, want %+v", u, wantUsage)
			}
			if got := callIDs(r.ToolCalls()); !reflect.DeepEqual(got, wantCalls) {
				t.Fatalf("client calls %v, want %v", got, wantCalls)
			}
			if got := answerText(c.format, final); got != texts[len(texts)-1] {
				t.Fatalf("final text %q, want %q", got, texts[len(texts)-1])
			}
			wantStop := map[bool]string{false: "end_turn", true: "tool_use"}[c.mixed]
			if c.format == provider.Chat {
				wantStop = map[bool]string{false: "stop", true: "tool_calls"}[c.mixed]
			}
			if c.format != provider.Responses && stopReason(final) != wantStop {
				t.Fatalf("stop reason %q, want %q: %s", stopReason(final), wantStop, final)
			}
		})
	}
}

// TestLoopStream: SSE answers stitched into one client stream, fed to the
// stitcher in small pieces.
func TestLoopStream(t *testing.T) {
	ctx := context.Background()
	cfg := Config{}
	for _, c := range loopCases(allFormats...) {
		t.Run(c.String(), func(t *testing.T) {
			mem, model, body := setupLoop(t, c)
			var client bytes.Buffer
			st, err := NewStitcher(c.format, &client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var firstTurn recoverytest.Turn
			for round := 0; ; round++ {
				turn, err := model.Answer(body)
				if err != nil {
					t.Fatalf("round %d: provider refused the request: %v\n%s", round, err, body)
				}
				stream := turn.Stream(c.format, round)
				if round == 0 {
					firstTurn = turn
				}
				for len(stream) > 0 {
					n := min(len(stream), 7)
					if _, err := st.Write(stream[:n]); err != nil {
						t.Fatal(err)
					}
					stream = stream[n:]
				}
				r, err := st.EndRound()
				if err != nil {
					t.Fatal(err)
				}
				if !r.Continue {
					break
				}
				Run(ctx, cfg, mem, loopTenant, r.Calls)
				if body, err = FollowUp(c.format, body, r.Answer, r.Calls); err != nil {
					t.Fatalf("follow-up from the streamed answer: %v\n%s", err, r.Answer)
				}
			}
			// but for the tools Responses events echo: the client's own.
			if want := firstTurn.Echo([]byte(requests[c.format])).Stream(c.format, 0); c.rounds == 0 && !bytes.Equal(client.Bytes(), want) {
				t.Fatalf("a stream that never calls our tool must reach the client byte for byte:\n%s\nwant\n%s", client.Bytes(), want)
			}
			if bytes.Contains(client.Bytes(), []byte(ToolName)) {
				t.Fatalf("the client sees the gateway's tool:\n%s", client.Bytes())
			}
			texts, wantUsage, wantCalls := c.expect(cfg, model)
			r := response.NewReader(c.format, response.Options{Stream: true})
			r.Write(client.Bytes())
			if u := sums(r.Usage()); u != openAIUsage(c.format, wantUsage) {
				t.Fatalf("usage %+v, want %+v\n%s", u, wantUsage, client.Bytes())
			}
			if got := callIDs(r.ToolCalls()); !reflect.DeepEqual(got, wantCalls) {
				t.Fatalf("client calls %v, want %v", got, wantCalls)
			}
			checkClientStream(t, c, client.Bytes(), texts)
		})
	}
}

func openAIUsage(format provider.Format, u provider.Usage) provider.Usage {
	if format != provider.Anthropic {
		u.CacheWrite = 0
	}
	return u
}

func callIDs(calls []response.ToolCall) []string {
	var out []string
	for _, c := range calls {
		if c.Name == ToolName {
			out = append(out, "OWN:"+c.ID)
			continue
		}
		out = append(out, c.ID)
	}
	return out
}

func answerText(format provider.Format, body []byte) string {
	var v struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Output []struct {
			Type    string
			Content []struct{ Text string }
		}
		Content []struct{ Type, Text string }
	}
	json.Unmarshal(body, &v)
	var out strings.Builder
	switch format {
	case provider.Chat:
		out.WriteString(v.Choices[0].Message.Content)
	case provider.Responses:
		for _, it := range v.Output {
			for _, c := range it.Content {
				out.WriteString(c.Text)
			}
		}
	case provider.Anthropic:
		for _, b := range v.Content {
			out.WriteString(b.Text)
		}
	}
	return out.String()
}

func stopReason(body []byte) string {
	var v struct {
		StopReason string `json:"stop_reason"`
		Choices    []struct {
			FinishReason string `json:"finish_reason"`
		}
	}
	json.Unmarshal(body, &v)
	if len(v.Choices) > 0 {
		return v.Choices[0].FinishReason
	}
	return v.StopReason
}

type clientEvent struct {
	name string
	data map[string]any
	raw  []byte
}

func clientEvents(t *testing.T, stream []byte) []clientEvent {
	var evs []clientEvent
	e := &response.Events{OnEvent: func(ev response.Event) {
		var m map[string]any
		if string(ev.Data) == "[DONE]" {
			evs = append(evs, clientEvent{ev.Name, nil, bytes.Clone(ev.Data)})
			return
		}
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			t.Fatalf("client event is not JSON: %q", ev.Raw)
		}
		evs = append(evs, clientEvent{ev.Name, m, bytes.Clone(ev.Data)})
	}}
	e.Write(stream)
	e.Flush()
	return evs
}

func num(v any) int { f, _ := v.(float64); return int(f) }

// checkClientStream verifies the stitched stream is one well-formed answer
// of its format carrying every round's text and none of our calls.
func checkClientStream(t *testing.T, c loopCase, stream []byte, texts []string) {
	t.Helper()
	evs := clientEvents(t, stream)
	if bytes.Contains(stream, []byte(ToolName)) {
		t.Fatalf("the client stream mentions the gateway's tool:\n%s", stream)
	}
	var text strings.Builder
	switch c.format {
	case provider.Chat:
		if string(evs[len(evs)-1].raw) != "[DONE]" {
			t.Fatalf("last event %q", evs[len(evs)-1].raw)
		}
		finishes, usages, calls := 0, 0, map[int]bool{}
		for _, ev := range evs[:len(evs)-1] {
			if ev.data["id"] != "chatcmpl-0" {
				t.Fatalf("chunk id %v: one stream, one id", ev.data["id"])
			}
			if ev.data["usage"] != nil {
				usages++
			}
			chs, _ := ev.data["choices"].([]any)
			for _, ch := range chs {
				if fr := field(ch, "finish_reason"); fr != nil {
					finishes++
					if want := map[bool]string{false: "stop", true: "tool_calls"}[c.mixed]; fr != want {
						t.Fatalf("finish_reason %v, want %s", fr, want)
					}
				}
				if s, ok := field(ch, "delta", "content").(string); ok {
					text.WriteString(s)
				}
				tcs, _ := field(ch, "delta", "tool_calls").([]any)
				for _, tc := range tcs {
					i := num(field(tc, "index"))
					if !calls[i] && i != len(calls) {
						t.Fatalf("tool call index %d after %d calls", i, len(calls))
					}
					calls[i] = true
				}
			}
		}
		if finishes != 1 || usages != 1 {
			t.Fatalf("%d finish chunks, %d usage chunks", finishes, usages)
		}
	case provider.Anthropic:
		if evs[0].name != "message_start" || evs[len(evs)-1].name != "message_stop" || evs[len(evs)-2].name != "message_delta" {
			t.Fatalf("message framing: first %s, last %s", evs[0].name, evs[len(evs)-1].name)
		}
		starts, open := 0, map[int]bool{}
		for _, ev := range evs[1 : len(evs)-2] {
			if ev.name == "message_start" || ev.name == "message_stop" || ev.name == "message_delta" {
				t.Fatalf("a second %s: rounds leaked into the client stream", ev.name)
			}
			i := num(ev.data["index"])
			switch ev.name {
			case "content_block_start":
				if i != starts || open[i] {
					t.Fatalf("block index %d, want %d", i, starts)
				}
				open[i] = true
				starts++
			case "content_block_delta":
				if !open[i] {
					t.Fatalf("delta for block %d not open", i)
				}
				if d, _ := ev.data["delta"].(map[string]any); d["type"] == "text_delta" {
					text.WriteString(d["text"].(string))
				}
			case "content_block_stop":
				if !open[i] {
					t.Fatalf("stop for block %d not open", i)
				}
				delete(open, i)
			}
		}
		if len(open) != 0 {
			t.Fatalf("blocks left open: %v", open)
		}
		sr := evs[len(evs)-2].data["delta"].(map[string]any)["stop_reason"]
		if want := map[bool]string{false: "end_turn", true: "tool_use"}[c.mixed]; sr != want {
			t.Fatalf("stop_reason %v, want %s", sr, want)
		}
	case provider.Responses:
		if evs[0].name != "response.created" || evs[len(evs)-1].name != "response.completed" {
			t.Fatalf("framing: first %s, last %s", evs[0].name, evs[len(evs)-1].name)
		}
		added, shown := 0, []any{}
		for i, ev := range evs {
			if num(ev.data["sequence_number"]) != i {
				t.Fatalf("event %d has sequence_number %v", i, ev.data["sequence_number"])
			}
			if i > 0 && (ev.name == "response.created" || ev.name == "response.in_progress" && i > 1) {
				t.Fatalf("a later round's %s leaked", ev.name)
			}
			if i < len(evs)-1 && ev.name == "response.completed" {
				t.Fatal("a round's response.completed leaked")
			}
			switch ev.name {
			case "response.output_item.added":
				if num(ev.data["output_index"]) != added {
					t.Fatalf("output_index %v, want %d", ev.data["output_index"], added)
				}
				added++
			case "response.output_item.done":
				shown = append(shown, ev.data["item"])
			case "response.output_text.delta":
				text.WriteString(ev.data["delta"].(string))
			}
		}
		final := evs[len(evs)-1].data["response"].(map[string]any)
		// A reasoning item reaches the client only from the round that
		// called nothing of ours: the others preceded our calls.
		var reasoning []any
		for _, it := range shown {
			if field(it, "type") == "reasoning" {
				reasoning = append(reasoning, field(it, "id"))
			}
		}
		if want := []any{fmt.Sprintf("rs_%d", c.rounds)}; c.rounds <= DefaultMaxRounds && !reflect.DeepEqual(reasoning, want) || c.rounds > DefaultMaxRounds && reasoning != nil {
			t.Fatalf("reasoning items shown %v", reasoning)
		}
		if !reflect.DeepEqual(final["output"], shown) {
			t.Fatalf("completed.output %v\nwant the items shown %v", final["output"], shown)
		}
		// The id is the last round's: its stored state holds the exchange.
		want := fmt.Sprintf("resp_%d", min(c.rounds, DefaultMaxRounds))
		if final["id"] != want {
			t.Fatalf("final id %v, want %s", final["id"], want)
		}
	}
	if got := text.String(); got != strings.Join(texts, "") {
		t.Fatalf("client text %q, want %q", got, strings.Join(texts, ""))
	}
}

// The scripted model names the gateway's tool as the gateway does.
func TestScriptedModelToolName(t *testing.T) {
	if recoverytest.ToolName != ToolName {
		t.Fatalf("recoverytest.ToolName %q, recovery.ToolName %q", recoverytest.ToolName, ToolName)
	}
}
