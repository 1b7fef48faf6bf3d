package response

import "strings"

// Real-shaped provider responses, following the providers' documented
// bodies and event streams. Each arguments string of the gateway's tool is
// argsGet.
const argsGet = `{"action":"artifact_get","artifact_id":"a_0123456789abcdef0123456789abcdef","offset":0,"limit":8000}`

const chatBodyFixture = `{"id":"chatcmpl-9","object":"chat.completion","created":1733000000,"model":"gpt-4o-2024-08-06",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
	`{"id":"call_tt1","type":"function","function":{"name":"token_terminator","arguments":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}"}},` +
	`{"id":"call_bash","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls -la\"}"}}]},` +
	`"logprobs":null,"finish_reason":"tool_calls"}],` +
	`"usage":{"prompt_tokens":1850,"completion_tokens":41,"total_tokens":1891,"prompt_tokens_details":{"cached_tokens":1536,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},` +
	`"system_fingerprint":"fp_1"}`

// chatStreamFixture uses "\r\n" line endings, as some compatible providers do.
var chatStreamFixture = strings.ReplaceAll(
	`data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_tt1","type":"function","function":{"name":"token_terminator","arguments":""}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"action\":\"artifact_get\",\"artifact_id\":"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_bash","type":"function","function":{"name":"bash","arguments":"{\"cmd\":"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"ls -la\"}"}}]},"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1850,"completion_tokens":41,"total_tokens":1891,"prompt_tokens_details":{"cached_tokens":1536}}}

data: [DONE]

`, "\n", "\r\n")

const responsesBodyFixture = `{"id":"resp_1","object":"response","created_at":1733000000,"status":"completed","model":"gpt-5",` +
	`"output":[{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAA"},` +
	`{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}","call_id":"call_tt1","name":"token_terminator"},` +
	`{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"cmd\":\"ls -la\"}","call_id":"call_bash","name":"bash"}],` +
	`"usage":{"input_tokens":2100,"input_tokens_details":{"cached_tokens":1920},"output_tokens":77,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":2177}}`

const responsesStreamFixture = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_tt1","name":"token_terminator"}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":0,"delta":"{\"action\":\"artifact_get\","}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc_1","output_index":0,"delta":"\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":5,"item_id":"fc_1","output_index":0,"arguments":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\",\"offset\":0,\"limit\":8000}","call_id":"call_tt1","name":"token_terminator"}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":7,"output_index":1,"item":{"id":"fc_2","type":"function_call","status":"in_progress","arguments":"","call_id":"call_bash","name":"bash"}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"cmd\":\"ls -la\"}","call_id":"call_bash","name":"bash"}}

event: response.completed
data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":2100,"input_tokens_details":{"cached_tokens":1920},"output_tokens":77,"output_tokens_details":{"reasoning_tokens":32},"total_tokens":2177}}}

`

const anthropicBodyFixture = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
	`"content":[{"type":"text","text":"Let me look."},` +
	`{"type":"tool_use","id":"toolu_tt1","name":"token_terminator","input":{"action":"artifact_get","artifact_id":"a_0123456789abcdef0123456789abcdef","offset":0,"limit":8000}},` +
	`{"type":"tool_use","id":"toolu_bash","name":"bash","input":{"cmd":"ls -la"}}],` +
	`"stop_reason":"tool_use","stop_sequence":null,` +
	`"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":95}}`

const anthropicStreamFixture = `event: message_start
data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me look."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_tt1","name":"token_terminator","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_0123456789abcdef0123456789abcdef\","}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"offset\":0,\"limit\":8000}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_bash","name":"bash","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\":\"ls -la\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":95}}

event: message_stop
data: {"type":"message_stop"}

`
