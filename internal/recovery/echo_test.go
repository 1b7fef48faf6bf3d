package recovery

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TestStripToolEcho: the gateway's tool leaves the tools a Responses answer
// echoes, found by name in any position and spelling; every other byte
// stays, and answers that echo nothing of ours (or are of a format that
// echoes nothing) come back as they are.
func TestStripToolEcho(t *testing.T) {
	own := `{"type":"function","name":"token_terminator","strict":true,"parameters":{}}`
	cases := []struct {
		name     string
		format   provider.Format
		in, want string
	}{
		{"last", provider.Responses,
			`{"id":"r","tools":[{"type":"function","name":"bash"}, ` + own + `],"usage":{}}`,
			`{"id":"r","tools":[{"type":"function","name":"bash"}],"usage":{}}`},
		{"first, spaced", provider.Responses,
			"{\"tools\" : [ " + own + " ,\n {\"name\":\"a\"} , {\"type\":\"web_search\"} ] }",
			"{\"tools\" : [{\"name\":\"a\"},{\"type\":\"web_search\"}] }"},
		{"only", provider.Responses, `{"tools":[` + own + `]}`, `{"tools":[]}`},
		{"escaped name", provider.Responses, `{"tools":[{"name":"token\u005fterminator"}],"x":1}`, `{"tools":[],"x":1}`},
		{"client tools only", provider.Responses, `{"tools":[{"name":"bash"}]}`, `{"tools":[{"name":"bash"}]}`},
		{"no tools", provider.Responses, `{"output":[]}`, `{"output":[]}`},
		{"not JSON", provider.Responses, `{"tools":[` + own, `{"tools":[` + own},
		{"chat echoes nothing", provider.Chat, `{"tools":[` + own + `]}`, `{"tools":[` + own + `]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(StripToolEcho(c.format, []byte(c.in))); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestStitcherStripsEchoedTool: every event that carries the response
// object reaches the client without the gateway's tool, other events
// byte for byte, sequence numbers untouched.
func TestStitcherStripsEchoedTool(t *testing.T) {
	own := `{"name":"token_terminator","type":"function"}`
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[{\"name\":\"bash\"}," + own + "]}}\n\n" +
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[" + own + "]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[{\"name\":\"bash\"}," + own + "],\"usage\":null}}\n\n"
	want := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[{\"name\":\"bash\"}]}}\n\n" +
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"r\",\"output\":[],\"tools\":[{\"name\":\"bash\"}],\"usage\":null}}\n\n"
	var client flushRecorder
	st, err := NewStitcher(provider.Responses, &client, Config{})
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte(stream))
	if r, err := st.EndRound(); err != nil || r.Continue {
		t.Fatalf("EndRound: %+v %v", r, err)
	}
	if got := client.String(); got != want {
		t.Fatalf("client got\n%s\nwant\n%s", got, want)
	}
}
