package recovery

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// The OpenAI Responses API echoes the request's tools in every response
// object: the JSON answer's tools and the response of response.created,
// response.in_progress, response.completed and the other events that carry
// it. The gateway's tool went upstream only because the gateway added it,
// so the client gets the echo without it: the tools array is re-emitted
// without the gateway's definition (the provider re-serialises definitions,
// so it is found by name), every other byte as the provider sent it. Chat
// Completions and Anthropic Messages echo no tools.

// StripToolEcho returns answer, a JSON answer of format, without the
// gateway's tool in the tools the provider echoed. An answer that echoes
// none (any format but Responses, or no tools member naming it) comes back
// as answer itself.
func StripToolEcho(format provider.Format, answer []byte) []byte {
	if format != provider.Responses {
		return answer
	}
	root, err := jsonv.Parse(answer, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) {
		return answer
	}
	edits := echoEdits(answer, root.Get("tools"), nil)
	if len(edits) == 0 {
		return answer
	}
	return spliceOr(answer, edits)
}

// echoEdits appends the edit that removes the gateway's tool from tools,
// an echoed tools array, when it names it.
func echoEdits(src []byte, tools *jsonv.Node, edits []edit) []edit {
	if !tools.Is(jsonv.Array) {
		return edits
	}
	return filterArray(src, tools, ownToolDef, edits)
}

// eventEchoEdits is echoEdits for an SSE event of a Responses stream: the
// tools of the response object it carries, if any.
func eventEchoEdits(src []byte, root *jsonv.Node, edits []edit) []edit {
	resp := root.Get("response")
	if !resp.Is(jsonv.Object) {
		return edits
	}
	return echoEdits(src, resp.Get("tools"), edits)
}

func ownToolDef(src []byte, n *jsonv.Node) bool { return toolNamed(src, n, ToolName) }
