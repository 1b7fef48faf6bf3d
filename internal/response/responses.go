package response

import "github.com/tokenterminator/caddy-token-terminator/internal/provider"

// OpenAI Responses: a body's output[] items of type function_call and its
// usage; in a stream, each response.output_item.done event carries a whole
// item and response.completed (or .incomplete / .failed) the final response
// with its usage.
type responsesReader struct{}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

type responsesItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type responsesBody struct {
	Model  string          `json:"model"`
	Output []responsesItem `json:"output"`
	Usage  *responsesUsage `json:"usage"`
}

type responsesEvent struct {
	Type     string         `json:"type"`
	Item     *responsesItem `json:"item"`
	Response *responsesBody `json:"response"`
}

func (u *responsesUsage) usage() provider.Usage {
	out := provider.Usage{Input: u.InputTokens, Output: u.OutputTokens, Known: true}
	if u.InputTokensDetails != nil {
		out.CacheRead = u.InputTokensDetails.CachedTokens
	}
	return out
}

func (r *Reader) responsesItem(it *responsesItem) {
	if it.Type == "function_call" {
		r.addCall(it.CallID, it.Name, []byte(it.Arguments))
	}
}

func (responsesReader) body(r *Reader, b []byte) error {
	var v responsesBody
	if err := decode(b, &v); err != nil {
		return err
	}
	for i := range v.Output {
		r.responsesItem(&v.Output[i])
	}
	if v.Usage != nil {
		r.usage = v.Usage.usage()
		r.usage.Model = v.Model
	}
	return nil
}

// responsesRead are the events (by SSE event name, which OpenAI always
// sends with Responses streams) that carry what the reader keeps; the
// others are only checked to be JSON.
var responsesRead = map[string]bool{"response.output_item.done": true, "response.completed": true,
	"response.incomplete": true, "response.failed": true}

func (responsesReader) event(r *Reader, ev Event) error {
	switch ev.Name {
	case "response.completed", "response.incomplete", "response.failed":
		r.complete = true
	}
	if ev.Name != "" && !responsesRead[ev.Name] {
		return validJSON(ev.Data)
	}
	var v responsesEvent
	if err := decode(ev.Data, &v); err != nil {
		return err
	}
	switch v.Type {
	case "response.output_item.done":
		if v.Item != nil {
			r.responsesItem(v.Item)
		}
	case "response.completed", "response.incomplete", "response.failed":
		if v.Response != nil && v.Response.Usage != nil {
			r.usage = v.Response.Usage.usage()
			r.usage.Model = v.Response.Model
		}
	}
	return nil
}
