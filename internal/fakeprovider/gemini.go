package fakeprovider

import (
	"fmt"
	"net/http"
	"strings"
)

// geminiModel is the model a Gemini path names (…/models/{model}:method).
func geminiModel(path string) string {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	m := path[i+len("/models/"):]
	if j := strings.IndexByte(m, ':'); j >= 0 {
		m = m[:j]
	}
	return m
}

// geminiCredential names the caller's cache for Gemini requests: the
// x-goog-api-key header, the key query parameter or Vertex's bearer token.
func geminiCredential(r *http.Request) string {
	c := r.Header.Get("X-Goog-Api-Key")
	if c == "" {
		c = r.URL.Query().Get("key")
	}
	if c == "" {
		c = r.Header.Get("Authorization")
	}
	return c
}

// geminiReply answers generateContent and streamGenerateContent as the
// Gemini API does: usageMetadata's promptTokenCount counts every input
// token, cachedContentTokenCount the part read from the (implicit) cache;
// a stream with alt=sse sends one GenerateContentResponse per data line,
// each with the usage so far, and without alt=sse a JSON array of them.
func geminiReply(w http.ResponseWriter, r *http.Request, model, text string, u Usage) {
	usage := func(out int) string {
		s := fmt.Sprintf(`{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d`, u.Input, out, u.Input+out)
		if u.CacheRead > 0 {
			s += fmt.Sprintf(`,"cachedContentTokenCount":%d,"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d}],"cacheTokensDetails":[{"modality":"TEXT","tokenCount":%d}]`, u.CacheRead, u.Input, u.CacheRead)
		}
		return s + "}"
	}
	chunk := func(piece, finish string, out int) string {
		f := ""
		if finish != "" {
			f = fmt.Sprintf(`,"finishReason":%q`, finish)
		}
		return fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%q}],"role":"model"}%s,"index":0}],"usageMetadata":%s,"modelVersion":%q,"responseId":"fake-gemini"}`,
			piece, f, usage(out), model)
	}
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		WriteJSON(w, chunk(text, "STOP", outputTokens))
		return
	}
	half := len(text) / 2
	first, last := chunk(text[:half], "", outputTokens/2), chunk(text[half:], "STOP", outputTokens)
	if r.URL.Query().Get("alt") != "sse" {
		WriteJSON(w, "["+first+",\r\n"+last+"]")
		return
	}
	WriteSSE(w, [2]string{"", first}, [2]string{"", last})
}
