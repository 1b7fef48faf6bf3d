package recovery

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Real-shaped requests and answers per format. An answer calls the
// gateway's tool (call id "own1") and, when mixed, a client tool too
// ("client1"). Their arguments name the artifact id ARTIFACT, which tests
// replace.

var requests = map[provider.Format]string{
	provider.Chat: `{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},` +
		`{"role":"user","content":"What did the log say?"}],"tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}],"stream":false}`,
	provider.Responses: `{"model":"gpt-5","input":[{"role":"developer","content":"Be terse."},{"role":"user","content":[{"type":"input_text","text":"What did the log say?"}]}],` +
		`"tools":[{"type":"function","name":"bash","parameters":{"type":"object"}}],"store":false}`,
	provider.Anthropic: `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"What did the log say?"}],` +
		`"system":"Be terse.","tools":[{"name":"bash","input_schema":{"type":"object"}}]}`,
}

const ownArgs = `{"action":"artifact_get","artifact_id":"ARTIFACT","offset":0,"limit":8000}`

func chatAnswer(mixed bool, finalText string) string {
	if finalText != "" {
		return `{"id":"chatcmpl-2","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":` + q(finalText) + `},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":900,"completion_tokens":20,"total_tokens":920,"prompt_tokens_details":{"cached_tokens":512}}}`
	}
	calls := `{"id":"own1","type":"function","function":{"name":"token_terminator","arguments":` + q(ownArgs) + `}}`
	if mixed {
		calls += `,{"id":"client1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls\"}"}}`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` + calls + `]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":800,"completion_tokens":30,"total_tokens":830,"prompt_tokens_details":{"cached_tokens":0}}}`
}

func responsesAnswer(mixed bool, finalText string) string {
	usage := `"usage":{"input_tokens":800,"input_tokens_details":{"cached_tokens":0},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":830}`
	if finalText != "" {
		return `{"id":"resp_2","object":"response","status":"completed","output":[{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":` + q(finalText) + `}]}],` + usage + `}`
	}
	items := `{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAAB=="},` +
		`{"id":"fc_1","type":"function_call","status":"completed","arguments":` + q(ownArgs) + `,"call_id":"own1","name":"token_terminator"}`
	if mixed {
		items += `,{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"cmd\":\"ls\"}","call_id":"client1","name":"bash"}`
	}
	return `{"id":"resp_1","object":"response","status":"completed","output":[` + items + `],` + usage + `}`
}

func anthropicAnswer(mixed bool, finalText string) string {
	usage := `"usage":{"input_tokens":50,"cache_creation_input_tokens":700,"cache_read_input_tokens":50,"output_tokens":30}`
	if finalText != "" {
		return `{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":` + q(finalText) + `}],"stop_reason":"end_turn","stop_sequence":null,` + usage + `}`
	}
	blocks := `{"type":"thinking","thinking":"Need the log.","signature":"EqQBCkYIAxgCIkD"},{"type":"text","text":"Reading it."},` +
		`{"type":"tool_use","id":"own1","name":"token_terminator","input":` + ownArgs + `}`
	if mixed {
		blocks += `,{"type":"tool_use","id":"client1","name":"bash","input":{"cmd":"ls"}}`
	}
	return `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` + blocks + `],"stop_reason":"tool_use","stop_sequence":null,` + usage + `}`
}

var answers = map[provider.Format]func(mixed bool, finalText string) string{
	provider.Chat:      chatAnswer,
	provider.Responses: responsesAnswer,
	provider.Anthropic: anthropicAnswer,
}

func q(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
