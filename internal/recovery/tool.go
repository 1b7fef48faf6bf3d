package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// ToolName is the name of the gateway's own tool.
const ToolName = "token_terminator"

// toolDescription tells the model what receipts are and when to recover.
// It quotes neither artifact.ReceiptPrefix nor artifact.FoldPrefix whole,
// so the definition is never mistaken for a receipt or a folded turn.
const toolDescription = "Lines marked Token Terminator artifact or Token Terminator folded turn, with an a_… id, " +
	"stand for earlier tool output or conversation turns the gateway stored to save space; their content is unchanged and recoverable. " +
	"Call artifact_get with the a_… id when you need the exact content (page with offset and next_offset), or artifact_search to find stored content by text."

// toolSchema is the JSON Schema of the tool's input, one constant so the
// definition's bytes never change (a changing tools array would bust the
// provider's prompt cache on every request).
const toolSchema = `{"type":"object","properties":{` +
	`"action":{"type":"string","enum":["artifact_get","artifact_search"]},` +
	`"artifact_id":{"type":"string","description":"the a_… id of a receipt (artifact_get)"},` +
	`"offset":{"type":"integer","minimum":0,"description":"first character to return (artifact_get; default 0)"},` +
	`"limit":{"type":"integer","minimum":1,"description":"characters per page (artifact_get, default 8000) or results (artifact_search, default 10)"},` +
	`"query":{"type":"string","description":"text to find, case-insensitive (artifact_search)"}},` +
	`"required":["action"],"additionalProperties":false}`

var definitions = func() map[provider.Format][]byte {
	name := string(jsonv.AppendString(nil, ToolName))
	desc := string(jsonv.AppendString(nil, toolDescription))
	return map[provider.Format][]byte{
		provider.Chat:      []byte(`{"type":"function","function":{"name":` + name + `,"description":` + desc + `,"parameters":` + toolSchema + `}}`),
		provider.Responses: []byte(`{"type":"function","name":` + name + `,"description":` + desc + `,"parameters":` + toolSchema + `}`),
		provider.Anthropic: []byte(`{"name":` + name + `,"description":` + desc + `,"input_schema":` + toolSchema + `}`),
	}
}()

// Definition returns the tool's definition in format's shape (one element
// of the request's tools array), or nil for another format. The bytes are
// constant; the caller must not modify them.
func Definition(format provider.Format) []byte { return definitions[format] }

var (
	// ErrToolPresent means the client's tools already hold a tool named
	// ToolName: the gateway adds nothing and must not answer calls of it.
	ErrToolPresent = errors.New("recovery: the client already defines a tool named " + ToolName)
	// ErrShape means the body is not a JSON object of a known format, or
	// its tools value is not an array.
	ErrShape = errors.New("recovery: request body of unexpected shape")
)

// AppendTool returns body with the tool's definition appended to its tools
// array, or a tools array holding only it added at the end of the object
// when there is none. Every other byte is unchanged. On error (ErrToolPresent,
// ErrShape) it returns body itself.
func AppendTool(format provider.Format, body []byte) ([]byte, error) {
	def := Definition(format)
	if def == nil {
		return body, ErrShape
	}
	root, err := jsonv.Parse(body, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) {
		return body, ErrShape
	}
	tools := root.Get("tools")
	switch {
	case tools == nil:
		ins := append([]byte(`"tools":[`), def...)
		ins = append(ins, ']')
		out, err := insertMember(body, root, ins)
		if err != nil {
			return body, err
		}
		return out, nil
	case !tools.Is(jsonv.Array):
		return body, ErrShape
	}
	for _, t := range tools.Elems {
		if toolNamed(body, t, ToolName) {
			return body, ErrToolPresent
		}
	}
	out, err := appendElems(body, tools, def)
	if err != nil {
		return body, err
	}
	return out, nil
}

// toolNamed reports whether a tools element names name, in any format's
// shape (name, function.name, custom.name).
func toolNamed(src []byte, t *jsonv.Node, name string) bool {
	if fds := t.Get("functionDeclarations"); fds.Is(jsonv.Array) { // Gemini
		for _, fd := range fds.Elems {
			if fd.Get("name").StringIs(src, name) {
				return true
			}
		}
	}
	return t.Get("name").StringIs(src, name) ||
		t.Get("function").Get("name").StringIs(src, name) ||
		t.Get("custom").Get("name").StringIs(src, name)
}

// Call is one call of the tool, with its result once executed.
type Call struct {
	ID     string // the provider's call id (tool_call_id, call_id, tool_use_id)
	Args   []byte
	Result []byte // Execute's JSON
}

// OwnCalls returns the calls of the gateway's tool among calls (read with
// response.Options.Keep = []string{ToolName}).
func OwnCalls(calls []response.ToolCall) []Call {
	var out []Call
	for _, c := range calls {
		if c.Name == ToolName {
			out = append(out, Call{ID: c.ID, Args: c.Arguments})
		}
	}
	return out
}

// Run executes the calls, filling in their Results: the first
// cfg.MaxCalls are run; every call past them gets errTooManyCalls, so that
// the model has an answer for each (the providers require one) and the
// vault is read at most MaxCalls times a round.
func Run(ctx context.Context, cfg Config, arts Artifacts, tenant string, calls []Call) {
	cfg = cfg.WithDefaults()
	for i := range calls {
		if i >= cfg.MaxCalls {
			calls[i].Result = errorJSON(tooManyCalls(cfg.MaxCalls))
			continue
		}
		calls[i].Result = ExecuteWith(ctx, cfg, arts, tenant, calls[i].Args)
	}
}

func tooManyCalls(n int) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: "too_many_calls",
		Message: "at most " + strconv.Itoa(n) + " calls are answered per turn; call again for the rest"}
}

// toolArgs is the tool's input. Numbers are taken as written so that 1.5
// or 1e3 are refused rather than rounded; a number written as a string
// ("10"), which models sometimes send, is accepted.
type toolArgs struct {
	Action     string       `json:"action"`
	ArtifactID string       `json:"artifact_id"`
	Offset     *json.Number `json:"offset"`
	Limit      *json.Number `json:"limit"`
	Query      string       `json:"query"`
}

// Execute runs one call of the tool for tenant with the default Config.
func Execute(ctx context.Context, arts Artifacts, tenant string, args []byte) []byte {
	return ExecuteWith(ctx, Config{}, arts, tenant, args)
}

// ExecuteWith runs one call of the tool: args is the model's input object.
// The result is the API's JSON for the same request (a Page, Hits, or an
// error object), so the model reads exactly what a client of the API would.
func ExecuteWith(ctx context.Context, cfg Config, arts Artifacts, tenant string, args []byte) []byte {
	r := reader{arts: arts, cfg: cfg.WithDefaults()}
	var a toolArgs
	dec := json.NewDecoder(bytes.NewReader(args))
	if err := dec.Decode(&a); err != nil {
		return errorJSON(badRequest("arguments must be a JSON object with action, artifact_id, offset, limit or query"))
	}
	offset, err := argInt(a.Offset, "offset")
	if err != nil {
		return errorJSON(err)
	}
	limit, err := argInt(a.Limit, "limit")
	if err != nil {
		return errorJSON(err)
	}
	switch a.Action {
	case "artifact_get":
		p, err := r.page(ctx, tenant, a.ArtifactID, offset, limit)
		if err != nil {
			return errorJSON(err)
		}
		return marshal(p)
	case "artifact_search":
		h, err := r.search(ctx, tenant, a.Query, limit)
		if err != nil {
			return errorJSON(err)
		}
		return marshal(h)
	}
	return errorJSON(badRequest(`action must be "artifact_get" or "artifact_search"`))
}

func argInt(n *json.Number, name string) (int, *Error) {
	if n == nil {
		return 0, nil
	}
	v, err := strconv.Atoi(n.String())
	if err != nil || v < 0 {
		return 0, badRequest(name + " must be a non-negative integer")
	}
	return v, nil
}
