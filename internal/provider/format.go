// Package provider is the vocabulary of the providers the gateway speaks
// to: the request formats and their wire names, the headers each format's
// clients authenticate by, the one table of model families that pricing,
// the tokenizer choice and the metric labels read, the tokenizer names an
// operator may configure, and the usage a provider reports. It has no
// dependencies inside the module.
package provider

// Format is a provider request format. Its value is the format's wire
// name, as the gateway's logs, metrics and ledger write it.
type Format string

// The request formats.
const (
	Chat      Format = "openai_chat"        // OpenAI Chat Completions
	Responses Format = "openai_responses"   // OpenAI Responses
	Anthropic Format = "anthropic_messages" // Anthropic Messages
	Gemini    Format = "gemini"             // Gemini generateContent (and Vertex AI's)
)

// Formats lists every format.
var Formats = []Format{Chat, Responses, Anthropic, Gemini}

// ParseFormat returns the format of a wire name, and false for any other
// string (a configuration value or a ledger line).
func ParseFormat(s string) (Format, bool) {
	for _, f := range Formats {
		if string(f) == s {
			return f, true
		}
	}
	return "", false
}

// String returns the wire name.
func (f Format) String() string { return string(f) }

// Credential headers in the order providers authenticate by. Api-Key is
// Azure OpenAI's header; without it every Azure user would share one
// anonymous tenant. Anthropic authenticates by x-api-key first.
var (
	credentialHeaders          = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"}
	anthropicCredentialHeaders = []string{"X-Api-Key", "Authorization"}
	geminiCredentialHeaders    = []string{"X-Goog-Api-Key", "Authorization"}
)

// CredentialHeaders returns the headers a request of format carries its
// API credential in, in the order its provider reads them. The empty
// format (a request of no format: the artifact API) gets every header any
// format reads. The slice is shared: callers must not modify it.
func (f Format) CredentialHeaders() []string {
	switch f {
	case Anthropic:
		return anthropicCredentialHeaders
	case Gemini:
		return geminiCredentialHeaders // and ?key= (the gateway reads the query)
	}
	return credentialHeaders
}
