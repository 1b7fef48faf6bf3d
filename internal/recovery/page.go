package recovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Page is one page of an artifact, as the API and the tool return it.
// Offsets count characters (Unicode code points), so a page never splits a
// UTF-8 sequence. NextOffset is nil on the last page.
type Page struct {
	ArtifactID string `json:"artifact_id"`
	Content    string `json:"content"`
	Offset     int    `json:"offset"`
	NextOffset *int   `json:"next_offset"`
	TotalChars int    `json:"total_chars"`
	SHA256     string `json:"sha256"`
	ToolName   string `json:"tool_name"`
}

// Hit is one search result: never content.
type Hit struct {
	ArtifactID string `json:"artifact_id"`
	ToolName   string `json:"tool_name"`
	TotalChars int    `json:"total_chars"`
}

// Hits is a search answer.
type Hits struct {
	Results []Hit `json:"results"`
}

// Error is an API or tool error. Its JSON is {"error":{"type","message"}};
// Status is the HTTP status the API answers with.
type Error struct {
	Status  int    `json:"-"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// errNotFound is the one answer for an unknown id, another tenant's id and
// a malformed id alike, so a caller learns nothing about other tenants.
var errNotFound = &Error{Status: http.StatusNotFound, Type: "not_found", Message: "no artifact with this id"}

var errStore = &Error{Status: http.StatusServiceUnavailable, Type: "unavailable", Message: "the artifact store could not be read"}

// errUnreadable answers for one artifact whose record did not read back
// intact or did not open with the caller's keys (vault.Unreadable): never
// other content.
var errUnreadable = &Error{Status: http.StatusInternalServerError, Type: "vault_error", Message: "the artifact could not be read intact"}

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request", Message: msg}
}

// reader answers page and search requests for one Config; the API and the
// tool share it, so both give the same JSON for the same request.
type reader struct {
	arts Artifacts
	cfg  Config
}

// page returns characters [offset, offset+limit) of tenant's artifact id;
// limit 0 means the default page size, and a limit over MaxPageChars is
// capped.
func (r reader) page(ctx context.Context, tenant, id string, offset, limit int) (*Page, *Error) {
	if offset < 0 {
		return nil, badRequest("offset must be a non-negative integer")
	}
	if limit < 0 {
		return nil, badRequest("limit must be a positive integer")
	}
	if limit == 0 {
		limit = DefaultPageChars
	}
	limit = min(limit, r.cfg.MaxPageChars)
	d, ok, err := r.arts.Resolve(ctx, tenant, id)
	if err != nil {
		return nil, errStore
	}
	if !ok {
		return nil, errNotFound
	}
	a, ok, err := r.arts.Get(ctx, tenant, d)
	if err != nil {
		if vault.Unreadable(err) {
			return nil, errUnreadable
		}
		return nil, errStore
	}
	if !ok {
		return nil, errNotFound // evicted since Resolve
	}
	text := Content(a)
	total := utf8.RuneCountInString(text)
	if offset > total {
		return nil, badRequest("offset is beyond the end of the artifact (total_chars " + strconv.Itoa(total) + ")")
	}
	start := byteOffset(text, 0, offset)
	end := byteOffset(text, start, limit)
	p := &Page{
		ArtifactID: artifact.ID(d),
		Content:    text[start:end],
		Offset:     offset,
		TotalChars: total,
		SHA256:     contentSHA256(text), // of the content served; the id names the exact value (artifact.DigestOf)
		ToolName:   artifact.SanitizeTool(a.Tool),
	}
	if end < len(text) {
		next := offset + utf8.RuneCountInString(p.Content)
		p.NextOffset = &next
	}
	return p, nil
}

// byteOffset returns the byte index n characters after byte index from.
func byteOffset(s string, from, n int) int {
	i := from
	for ; n > 0 && i < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// MaxQueryChars bounds a search query, in characters: a longer one is
// refused (400 invalid_request), never cut short. The vault backends
// enforce the same bound (vault.MaxSearchQueryChars).
const MaxQueryChars = 256

var errQueryTooLong = badRequest("query must be at most " + strconv.Itoa(MaxQueryChars) + " characters")

// search lists tenant's artifacts matching query; limit 0 means the
// default, and a limit over MaxSearchResults is capped.
func (r reader) search(ctx context.Context, tenant, query string, limit int) (*Hits, *Error) {
	if limit < 0 {
		return nil, badRequest("limit must be a positive integer")
	}
	if utf8.RuneCountInString(query) > MaxQueryChars {
		return nil, errQueryTooLong
	}
	if limit == 0 {
		limit = DefaultSearchResults
	}
	limit = min(limit, r.cfg.MaxSearchResults)
	arts, err := r.arts.Search(ctx, tenant, query, limit)
	if err != nil {
		return nil, errStore
	}
	h := &Hits{Results: make([]Hit, 0, len(arts))}
	for _, a := range arts[:min(len(arts), limit)] {
		chars := a.Chars
		if a.Tool == foldTool {
			// A hit carries no text: whether it is a folded turn (two
			// brackets more) takes its record.
			if full, ok, err := r.arts.Get(ctx, tenant, a.Digest); err == nil && ok && isFoldedTurn(full) {
				chars += 2
			}
		}
		h.Results = append(h.Results, Hit{ArtifactID: artifact.ID(a.Digest), ToolName: artifact.SanitizeTool(a.Tool), TotalChars: chars})
	}
	return h, nil
}

// marshal encodes v without HTML escaping (content reads as stored) and
// without a trailing newline; the bytes are deterministic.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only this package's types are encoded, and they always encode.
		return []byte(`{"error":{"type":"internal","message":"encoding failed"}}`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func errorJSON(e *Error) []byte {
	return marshal(struct {
		Error *Error `json:"error"`
	}{e})
}

// contentSHA256 is the hex SHA-256 of an artifact's text, so a client can
// check the content it reassembled from the pages.
func contentSHA256(text string) string {
	s := sha256.Sum256([]byte(text))
	return hex.EncodeToString(s[:])
}

// foldTool is the tool name the compiler files a folded turn under.
const foldTool = "turn"

// Content is the text artifact a recovers as: what it stored, except for a
// folded turn. A folded turn is stored as the span of its messages in the
// request, from the first one's opening brace to the last one's closing
// brace, separators as sent (its identity names those bytes, so summaries
// already sent keep their ids, and vaults written before keep serving).
// It recovers as the JSON array of those messages: the span in brackets,
// each element's bytes as sent. A stored span is recognised by its record
// (filed under the turn tool, its text its raw bytes, an object sequence),
// which a receipted tool result never is: its raw value is a JSON string.
func Content(a artifact.Artifact) string {
	if isFoldedTurn(a) {
		return "[" + a.Text + "]"
	}
	return a.Text
}

func isFoldedTurn(a artifact.Artifact) bool {
	return a.Tool == foldTool && len(a.Text) >= 2 && a.Text[0] == '{' && a.Text[len(a.Text)-1] == '}' && a.Text == string(a.Raw)
}
